import { unauthorized, type OperatorActor } from '@kandev/contracts';
import type { OperatorClaims, VerifiedToken } from '@kandev/runtime';

export interface Operator {
  actor: OperatorActor;
  /** Epoch ms after which the token is no longer valid (every accepted token has `exp`). */
  expiresAt: number;
}

/** Verifies an operator token (audience, expiry, signature): `operatorTokenVerifier`, built once per gateway. */
export type VerifyOperatorToken = (token: string) => Promise<VerifiedToken<OperatorClaims>>;

/**
 * Verify an operator token and turn it into the actor every NATS request carries. The gateway
 * never decides workspace access itself: the orchestrator does, from this actor, and answers
 * FORBIDDEN or NOT_FOUND.
 */
export async function authenticate(verify: VerifyOperatorToken, token: string | null): Promise<Operator> {
  if (!token) throw unauthorized('missing bearer token');
  const { claims, expiresAtMs } = await verify(token);
  return { actor: { type: 'operator', id: claims.sub, workspaces: claims.workspaces }, expiresAt: expiresAtMs };
}
