import { createHmac } from 'node:crypto';

/** A JWT built by hand, so a test can produce exactly the malformed or hostile token it needs. */
export function forgeToken(header: Record<string, unknown>, payload: Record<string, unknown>, secret: string | null): string {
  const b64 = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const body = `${b64(header)}.${b64(payload)}`;
  const sig = secret === null ? '' : createHmac('sha256', secret).update(body).digest('base64url');
  return `${body}.${sig}`;
}

export interface HostileToken {
  name: string;
  /** null = no Authorization at all. */
  token: string | null;
}

/**
 * The token table: every way a bearer token can be wrong. `valid` is the claim set a
 * correct token of this audience carries (with `aud`, `iss`, `exp`); each case breaks one thing.
 * Every case must be refused (401) and answer nothing about the target.
 */
export function hostileTokens(secret: string, valid: Record<string, unknown>): HostileToken[] {
  const now = Math.floor(Date.now() / 1000);
  const base: Record<string, unknown> = { iat: now, exp: now + 3600, iss: 'kandev', ...valid };
  const hs = { alg: 'HS256', typ: 'JWT' };
  const without = (k: string) => Object.fromEntries(Object.entries(base).filter(([key]) => key !== k));
  const cases: HostileToken[] = [
    { name: 'missing', token: null },
    { name: 'malformed', token: 'not.a.jwt' },
    { name: 'not even three parts', token: 'garbage' },
    { name: 'expired', token: forgeToken(hs, { ...base, iat: now - 7200, exp: now - 3600 }, secret) },
    { name: 'without exp', token: forgeToken(hs, without('exp'), secret) },
    { name: 'wrong audience', token: forgeToken(hs, { ...base, aud: base.aud === 'kandev-mcp' ? 'kandev-gateway' : 'kandev-mcp' }, secret) },
    { name: 'wrong issuer', token: forgeToken(hs, { ...base, iss: 'evil' }, secret) },
    { name: 'wrong secret', token: forgeToken(hs, base, 'another-secret-0123456789abcdef') },
    { name: 'alg none', token: forgeToken({ alg: 'none', typ: 'JWT' }, base, null) },
    { name: 'alg HS512', token: forgeToken({ alg: 'HS512', typ: 'JWT' }, base, secret) },
  ];
  if ('mode' in base) cases.push({ name: 'without mode', token: forgeToken(hs, without('mode'), secret) });
  return cases;
}
