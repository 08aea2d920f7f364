import { describe, expect, it } from 'vitest';
// Relative, not @kandev/testkit: testkit depends on runtime, and the token table needs nothing else.
import { hostileTokens } from '@kandev/testkit';
import { BaseEnv, parseEnv } from '../src/env.js';
import { resolveKeys } from '../src/keys.js';
import { signAgentToken, signOperatorToken, verifyAgentToken, verifyOperatorToken } from '../src/jwt.js';

const SECRET = 'unit-secret-0123456789abcdef';
const TASK = '00000000-0000-4000-8000-000000000001';

describe('tokens (INTERFACES.md, Tokens)', () => {
  it('accepts what the signers mint', async () => {
    await expect(verifyOperatorToken(SECRET, await signOperatorToken(SECRET, { sub: 'alice', workspaces: ['*'] }))).resolves.toEqual({
      sub: 'alice',
      workspaces: ['*'],
    });
    await expect(verifyAgentToken(SECRET, await signAgentToken(SECRET, { task_id: TASK, mode: 'config' }))).resolves.toMatchObject({
      task_id: TASK,
      mode: 'config',
    });
  });

  it.each(hostileTokens(SECRET, { aud: 'kandev-mcp', sub: `task:${TASK}`, task_id: TASK, mode: 'task' }).filter((c) => c.token !== null))(
    'agent token %s → UNAUTHORIZED',
    async ({ token }) => {
      await expect(verifyAgentToken(SECRET, token!)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    },
  );

  it.each(hostileTokens(SECRET, { aud: 'kandev-gateway', sub: 'alice', workspaces: ['*'] }).filter((c) => c.token !== null))(
    'operator token %s → UNAUTHORIZED',
    async ({ token }) => {
      await expect(verifyOperatorToken(SECRET, token!)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    },
  );

  it('says why a token without exp is refused', async () => {
    const [noExp] = hostileTokens(SECRET, { aud: 'kandev-gateway', sub: 'alice', workspaces: ['*'] }).filter((c) => c.name === 'without exp');
    await expect(verifyOperatorToken(SECRET, noExp!.token!)).rejects.toMatchObject({ message: 'token has no expiry (exp)' });
  });
});

describe('KANDEV_JWT_SECRET (INTERFACES.md: at least 16 characters, required)', () => {
  it('has no default: a service holding a key refuses to start without one', () => {
    expect(() => resolveKeys({}, ['operator'])).toThrow(/KANDEV_OPERATOR_JWT_SECRET \(or KANDEV_JWT_SECRET\): is required \(at least 16 characters\)/);
    expect(() => resolveKeys({}, ['agent'])).toThrow(/KANDEV_AGENT_JWT_SECRET \(or KANDEV_JWT_SECRET\): is required/);
  });
  it('states the rule for a short one, without echoing the value', () => {
    let message = '';
    try {
      resolveKeys({ KANDEV_JWT_SECRET: 'short-pw' }, ['operator', 'agent']);
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/KANDEV_JWT_SECRET: must be at least 16 characters/);
    // One variable standing for both keys is reported once.
    expect(message.match(/KANDEV_JWT_SECRET:/g)).toHaveLength(1);
    expect(message).not.toContain('short-pw');
  });
  it('accepts 16 characters, as both keys', () => {
    expect(resolveKeys({ KANDEV_JWT_SECRET: '0123456789abcdef' }, ['operator', 'agent'])).toEqual({ operator: '0123456789abcdef', agent: '0123456789abcdef' });
  });
  it('BaseEnv no longer carries a key: each service names the keys it holds', () => {
    expect(parseEnv(BaseEnv, {})).not.toHaveProperty('KANDEV_JWT_SECRET');
  });
});
