import { describe, expect, it } from 'vitest';
import { agentTokenVerifier, operatorTokenVerifier, signAgentToken, signOperatorToken } from '../src/jwt.js';

const SECRET = 'jwt-test-secret-0123456789';

/** Both remembering verifiers, each with a way to mint its kind of token and read back who it names. */
const kinds = [
  {
    name: 'agent',
    verifier: (maxEntries?: number) => agentTokenVerifier(SECRET, maxEntries),
    sign: (secret: string, i: number, ttl?: string) => signAgentToken(secret, { task_id: `00000000-0000-4000-8000-00000000000${i}` }, ttl),
    who: (claims: unknown) => (claims as { task_id: string }).task_id,
    expected: (i: number) => `00000000-0000-4000-8000-00000000000${i}`,
  },
  {
    name: 'operator',
    verifier: (maxEntries?: number) => {
      const verify = operatorTokenVerifier(SECRET, maxEntries);
      return async (token: string) => (await verify(token)).claims;
    },
    sign: (secret: string, i: number, ttl?: string) => signOperatorToken(secret, { sub: `op-${i}`, workspaces: ['*'] }, ttl),
    who: (claims: unknown) => (claims as { sub: string }).sub,
    expected: (i: number) => `op-${i}`,
  },
];

describe.each(kinds)('$name token verifier', (kind) => {
  it('answers a token it verified before from memory, and refuses it once it has expired', async () => {
    const verify = kind.verifier();
    const token = await kind.sign(SECRET, 1, '2s');
    expect(kind.who(await verify(token))).toBe(kind.expected(1));
    expect(kind.who(await verify(token))).toBe(kind.expected(1));
    // JWT expiry has second granularity: poll until the remembered entry must have gone stale.
    const deadline = Date.now() + 10_000;
    let last: unknown;
    while (Date.now() < deadline) {
      last = await verify(token).catch((e: unknown) => e);
      if (last instanceof Error) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(last).toMatchObject({ code: 'UNAUTHORIZED', message: 'token expired' });
  });

  it('does not remember a token that failed, and keeps at most maxEntries tokens', async () => {
    const verify = kind.verifier(2);
    const forged = await kind.sign('another-secret-0123456789', 1);
    await expect(verify(forged)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(verify(forged)).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    const tokens = await Promise.all([1, 2, 3].map((i) => kind.sign(SECRET, i)));
    for (const [i, t] of tokens.entries()) expect(kind.who(await verify(t))).toBe(kind.expected(i + 1));
    for (const [i, t] of tokens.entries()) expect(kind.who(await verify(t))).toBe(kind.expected(i + 1));
  });
});

it("the operator verifier gives the token's expiry with its claims", async () => {
  const verify = operatorTokenVerifier(SECRET);
  const before = Date.now();
  const { claims, expiresAtMs } = await verify(await signOperatorToken(SECRET, { sub: 'alice', workspaces: ['w1'] }, '1h'));
  expect(claims).toEqual({ sub: 'alice', workspaces: ['w1'] });
  // `exp` has whole seconds: within a second of an hour from the signing.
  expect(expiresAtMs).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 3_600_000);
  expect(expiresAtMs).toBeLessThanOrEqual(Date.now() + 3_600_000);
});
