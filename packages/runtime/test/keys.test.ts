import { describe, expect, it } from 'vitest';
import { signAgentToken, signOperatorToken, verifyAgentToken, verifyOperatorToken } from '../src/jwt.js';
import { DEV_ONLY_KEYS, keyFromEnv, PLACEHOLDER_KEYS, resolveKeys, SERVICE_KEYS } from '../src/keys.js';
import { startService, type ServiceDefinition } from '../src/service.js';
import { BaseEnv } from '../src/env.js';

/** SPEC, ADR 0020: operator and agent tokens are signed with different keys. */
const OPERATOR = 'operator-key-0123456789abcdef-0123456789';
const AGENT = 'agent-key-0123456789abcdef-0123456789abc';
const TASK = '00000000-0000-4000-8000-000000000001';

describe('two keys', () => {
  it('each kind reads its own variable, else KANDEV_JWT_SECRET', () => {
    const env = { KANDEV_OPERATOR_JWT_SECRET: OPERATOR, KANDEV_AGENT_JWT_SECRET: AGENT, KANDEV_JWT_SECRET: 'shared-key-0123456789abcdef' };
    expect(keyFromEnv(env, 'operator')).toEqual({ key: OPERATOR, source: 'KANDEV_OPERATOR_JWT_SECRET' });
    expect(keyFromEnv(env, 'agent')).toEqual({ key: AGENT, source: 'KANDEV_AGENT_JWT_SECRET' });
    expect(keyFromEnv({ KANDEV_JWT_SECRET: 'shared-key-0123456789abcdef' }, 'agent')?.source).toBe('KANDEV_JWT_SECRET');
    expect(keyFromEnv({ KANDEV_OPERATOR_JWT_SECRET: OPERATOR }, 'agent')).toBeNull();
  });

  it('a token signed with the other key is refused', async () => {
    await expect(verifyOperatorToken(OPERATOR, await signOperatorToken(AGENT, { sub: 'mallory', workspaces: ['*'] }))).rejects.toMatchObject({
      code: 'UNAUTHORIZED',
    });
    await expect(verifyAgentToken(AGENT, await signAgentToken(OPERATOR, { task_id: TASK, mode: 'task' }))).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('no service holds both keys; holds needs none', () => {
    for (const [name, kinds] of Object.entries(SERVICE_KEYS)) expect(kinds.length, name).toBeLessThanOrEqual(1);
    expect(SERVICE_KEYS.gateway).toEqual(['operator']);
    expect(SERVICE_KEYS.mcp).toEqual(['agent']);
    expect(SERVICE_KEYS.lifecycle).toEqual(['agent']);
  });
});

describe('start-up refusals', () => {
  it.each(PLACEHOLDER_KEYS)('refuses the placeholder %s, in any NODE_ENV', (placeholder) => {
    for (const NODE_ENV of [undefined, 'development', 'production']) {
      const run = () => resolveKeys({ NODE_ENV, KANDEV_AGENT_JWT_SECRET: placeholder }, ['agent']);
      expect(run).toThrow(/KANDEV_AGENT_JWT_SECRET: is a placeholder/);
      expect(run).not.toThrow(new RegExp(placeholder));
    }
  });

  it('refuses the dev overlay keys with NODE_ENV=production only', () => {
    for (const key of DEV_ONLY_KEYS) {
      expect(resolveKeys({ KANDEV_OPERATOR_JWT_SECRET: key }, ['operator']).operator).toBe(key);
      expect(() => resolveKeys({ NODE_ENV: 'production', KANDEV_OPERATOR_JWT_SECRET: key }, ['operator'])).toThrow(/dev overlay key/);
    }
  });

  it('wants 32 bytes with NODE_ENV=production, 16 characters otherwise', () => {
    const k31 = 'k'.repeat(31);
    expect(resolveKeys({ KANDEV_JWT_SECRET: k31 }, ['agent']).agent).toBe(k31);
    expect(() => resolveKeys({ NODE_ENV: 'production', KANDEV_JWT_SECRET: k31 }, ['agent'])).toThrow(
      /KANDEV_JWT_SECRET: must be at least 32 bytes with NODE_ENV=production/,
    );
    expect(resolveKeys({ NODE_ENV: 'production', KANDEV_JWT_SECRET: 'k'.repeat(32) }, ['agent']).agent).toBe('k'.repeat(32));
    expect(() => resolveKeys({ NODE_ENV: 'production' }, ['operator'])).toThrow(/is required \(at least 32 bytes\)/);
  });

  it('a service refuses to start before it connects anything, and reads only the keys it names', async () => {
    const def: ServiceDefinition<typeof BaseEnv> = { name: 'mcp', keys: ['agent'], publishesEvents: false, start: async () => undefined };
    // NATS_URL points nowhere: the refusal comes before any connection attempt.
    const env = { NATS_URL: 'nats://127.0.0.1:1', KANDEV_OPERATOR_JWT_SECRET: OPERATOR };
    await expect(startService(def, env)).rejects.toThrow(/KANDEV_AGENT_JWT_SECRET \(or KANDEV_JWT_SECRET\): is required/);
    await expect(
      startService(def, { ...env, NODE_ENV: 'production', KANDEV_AGENT_JWT_SECRET: 'change-me-agent-key-at-least-32-random-bytes' }),
    ).rejects.toThrow(/placeholder/);
  });
});

describe('keys never reach child processes', () => {
  it('withholdKeys removes every key variable (runService applies it to process.env before starting)', async () => {
    const { withholdKeys } = await import('../src/keys.js');
    const env: Record<string, string | undefined> = { KANDEV_JWT_SECRET: 'a', KANDEV_OPERATOR_JWT_SECRET: 'b', KANDEV_AGENT_JWT_SECRET: 'c', PATH: '/bin' };
    withholdKeys(env);
    expect(env).toEqual({ PATH: '/bin' });
  });
});
