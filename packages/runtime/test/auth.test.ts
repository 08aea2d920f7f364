import { describe, expect, it } from 'vitest';
// Relative, not @kandev/testkit: testkit depends on runtime, and the token table needs nothing else.
import { hostileTokens } from '../../testkit/src/tokens.js';
import { BaseEnv, parseEnv } from '../src/env.js';
import { signAgentToken, signOperatorToken, verifyAgentToken, verifyOperatorToken } from '../src/jwt.js';

const SECRET = 'unit-secret-0123456789abcdef';
const TASK = '00000000-0000-4000-8000-000000000001';

describe('tokens (INTERFACES.md, Tokens)', () => {
  it('accepts what the signers mint', async () => {
    await expect(verifyOperatorToken(SECRET, await signOperatorToken(SECRET, { sub: 'alice', workspaces: ['*'] }))).resolves.toEqual({ sub: 'alice', workspaces: ['*'] });
    await expect(verifyAgentToken(SECRET, await signAgentToken(SECRET, { task_id: TASK, mode: 'config' }))).resolves.toMatchObject({ task_id: TASK, mode: 'config' });
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

describe('KANDEV_JWT_SECRET', () => {
  it('has no default: a service refuses to start without it', () => {
    expect(() => parseEnv(BaseEnv, {})).toThrow(/KANDEV_JWT_SECRET: is required \(at least 16 characters\)/);
  });
  it('states the rule for a short one, without echoing the value', () => {
    let message = '';
    try {
      parseEnv(BaseEnv, { KANDEV_JWT_SECRET: 'short-pw' });
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/KANDEV_JWT_SECRET: must be at least 16 characters/);
    expect(message).not.toContain('short-pw');
  });
  it('accepts 16 characters', () => {
    expect(parseEnv(BaseEnv, { KANDEV_JWT_SECRET: '0123456789abcdef' }).KANDEV_JWT_SECRET).toBe('0123456789abcdef');
  });
});
