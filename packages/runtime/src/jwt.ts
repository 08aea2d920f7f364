import { webcrypto } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors, type JWTPayload } from 'jose';
import { McpMode, unauthorized } from '@kandev/contracts';
import { z } from 'zod';

export const OPERATOR_AUDIENCE = 'kandev-gateway';
export const AGENT_AUDIENCE = 'kandev-mcp';
const ISSUER = 'kandev';

type HmacKey = webcrypto.CryptoKey;
const keys = new Map<string, Promise<HmacKey>>();
/**
 * The HMAC key, imported once per secret, as a WebCrypto key: jose signs and verifies through
 * WebCrypto, and converted a KeyObject on every call: 0.12–0.16 ms per token verified against
 * 0.08–0.10 with the imported key (bench scenario 06-token-verify).
 */
function key(secret: string): Promise<HmacKey> {
  let k = keys.get(secret);
  if (!k) {
    k = webcrypto.subtle.importKey('raw', Buffer.from(secret, 'utf8'), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign', 'verify']);
    // A secret WebCrypto refuses fails each use that awaits it, not the process (unhandled rejection).
    k.catch(() => undefined);
    if (keys.size > 16) keys.clear(); // tests use a handful of secrets; a service uses one
    keys.set(secret, k);
  }
  return k;
}

export const OperatorClaims = z.object({ sub: z.string().min(1), workspaces: z.array(z.string()).min(1) });
export type OperatorClaims = z.infer<typeof OperatorClaims>;
/** Agent claims as verified: `mode` is required (an agent token without one is refused, never served as `task`). */
export const AgentClaims = z.object({ task_id: z.uuid(), session_id: z.uuid().optional(), mode: McpMode, execution_id: z.uuid().optional() });
export type AgentClaims = z.infer<typeof AgentClaims>;
/** What a signer may pass: `mode` defaults to `task` when minting (lifecycle always sets it). */
const AgentClaimsInput = AgentClaims.extend({ mode: McpMode.default('task') });

export async function signOperatorToken(secret: string, claims: OperatorClaims, ttl = '12h'): Promise<string> {
  return new SignJWT({ workspaces: claims.workspaces })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(claims.sub)
    .setAudience(OPERATOR_AUDIENCE)
    .setIssuer(ISSUER)
    .setIssuedAt()
    .setExpirationTime(ttl)
    .sign(await key(secret));
}

export async function signAgentToken(secret: string, claims: z.input<typeof AgentClaimsInput>, ttl = '24h'): Promise<string> {
  const c = AgentClaimsInput.parse(claims);
  return new SignJWT({
    task_id: c.task_id,
    mode: c.mode,
    ...(c.session_id ? { session_id: c.session_id } : {}),
    ...(c.execution_id ? { execution_id: c.execution_id } : {}),
  })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(`task:${c.task_id}`)
    .setAudience(AGENT_AUDIENCE)
    .setIssuer(ISSUER)
    .setIssuedAt()
    .setExpirationTime(ttl)
    .sign(await key(secret));
}

/**
 * Signature (HS256 only: `alg: none` and every other algorithm are refused), audience and expiry.
 * `exp` is required: a token that never expires is refused. `iss`, when present, must be `kandev`.
 */
async function verify(secretKey: HmacKey, token: string, audience: string) {
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(token, secretKey, { audience, algorithms: ['HS256'], requiredClaims: ['exp'] }));
  } catch (e) {
    if (e instanceof joseErrors.JWTExpired) throw unauthorized('token expired');
    if (e instanceof joseErrors.JWTClaimValidationFailed && e.claim === 'exp') throw unauthorized('token has no expiry (exp)');
    throw unauthorized('invalid token');
  }
  if (payload.iss !== undefined && payload.iss !== ISSUER) throw unauthorized('invalid token issuer');
  return payload;
}

/** A token's verified claims and the epoch ms at which the token stops being valid (its `exp`). */
export interface VerifiedToken<C> {
  claims: C;
  expiresAtMs: number;
}

export async function verifyOperatorToken(secret: string, token: string): Promise<OperatorClaims> {
  return (await verifyOperator(await key(secret), token)).claims;
}
export async function verifyAgentToken(secret: string, token: string): Promise<AgentClaims> {
  return (await verifyAgent(await key(secret), token)).claims;
}

async function verifyOperator(secretKey: HmacKey, token: string): Promise<VerifiedToken<OperatorClaims>> {
  const payload = await verify(secretKey, token, OPERATOR_AUDIENCE);
  const p = OperatorClaims.safeParse(payload);
  if (!p.success) throw unauthorized('token lacks operator claims');
  return { claims: p.data, expiresAtMs: expiryOf(payload) };
}

async function verifyAgent(secretKey: HmacKey, token: string): Promise<VerifiedToken<AgentClaims>> {
  const payload = await verify(secretKey, token, AGENT_AUDIENCE);
  const p = AgentClaims.safeParse(payload);
  if (!p.success) throw unauthorized('token lacks agent claims');
  return { claims: p.data, expiresAtMs: expiryOf(payload) };
}

/** `verify` requires `exp`, so it is always a number here; the fallback only satisfies the type. */
const expiryOf = (payload: JWTPayload): number => (typeof payload.exp === 'number' ? payload.exp * 1000 : Number.POSITIVE_INFINITY);

/**
 * A verifier for a server that sees the same tokens again and again (an agent's MCP client sends
 * its token on every call, an operator's console on every request): a token that verified once is
 * answered from memory until it expires (HMAC verification through WebCrypto, jose's checks and the
 * claims' schema cost 0.1-0.3 ms a call). A token carries everything it grants and nothing revokes
 * one before its `exp` (a new signing key makes a new verifier), so the memory answers exactly what
 * verifying again would. Tokens that fail are not remembered. At most `maxEntries` tokens are kept;
 * the oldest go first.
 */
function rememberVerified<C>(
  secret: string,
  verifyOnce: (secretKey: HmacKey, token: string) => Promise<VerifiedToken<C>>,
  maxEntries: number,
): (token: string) => Promise<VerifiedToken<C>> {
  const secretKey = key(secret);
  const verified = new Map<string, VerifiedToken<C>>();
  return async (token) => {
    const hit = verified.get(token);
    if (hit && hit.expiresAtMs > Date.now()) return hit;
    if (hit) verified.delete(token);
    const fresh = await verifyOnce(await secretKey, token);
    if (verified.size >= maxEntries) verified.delete(verified.keys().next().value!);
    verified.set(token, fresh);
    return fresh;
  };
}

/** `verifyAgentToken` answered from memory for a token seen before (`rememberVerified`). */
export function agentTokenVerifier(secret: string, maxEntries = 10_000): (token: string) => Promise<AgentClaims> {
  const verifyToken = rememberVerified(secret, verifyAgent, maxEntries);
  return async (token) => (await verifyToken(token)).claims;
}

/** `verifyOperatorToken` answered from memory for a token seen before (`rememberVerified`), with the token's expiry. */
export function operatorTokenVerifier(secret: string, maxEntries = 10_000): (token: string) => Promise<VerifiedToken<OperatorClaims>> {
  return rememberVerified(secret, verifyOperator, maxEntries);
}

/** `Authorization: Bearer x` → x. */
export function bearer(header: string | string[] | undefined): string | null {
  const h = Array.isArray(header) ? header[0] : header;
  const m = h ? /^Bearer\s+(.+)$/i.exec(h.trim()) : null;
  return m?.[1] ?? null;
}
