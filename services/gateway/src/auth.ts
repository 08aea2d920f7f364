import { unauthorized, type OperatorActor } from '@kandev/contracts';
import { verifyOperatorToken } from '@kandev/runtime';

export interface Operator {
  actor: OperatorActor;
  /** Epoch ms after which the token is no longer valid (every accepted token has `exp`; null only if it cannot be read). */
  expiresAt: number | null;
}

/**
 * Verify an operator token (audience, expiry, signature) and turn it into the actor every NATS
 * request carries. The gateway never decides workspace access itself: the orchestrator does, from
 * this actor, and answers FORBIDDEN or NOT_FOUND.
 */
export async function authenticate(secret: string, token: string | null): Promise<Operator> {
  if (!token) throw unauthorized('missing bearer token');
  const claims = await verifyOperatorToken(secret, token);
  return { actor: { type: 'operator', id: claims.sub, workspaces: claims.workspaces }, expiresAt: expiryOf(token) };
}

/** `exp` of a token whose signature was already verified (so reading its payload is safe). */
function expiryOf(token: string): number | null {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as { exp?: unknown };
    return typeof payload.exp === 'number' ? payload.exp * 1000 : null;
  } catch {
    return null;
  }
}
