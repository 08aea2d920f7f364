import { createHmac, randomUUID } from 'node:crypto';
import { SignJWT, jwtVerify, errors as joseErrors } from 'jose';
import { unauthorized } from '@kandev/contracts';
import { z } from 'zod';

/*
 * Single-use `/ws` tickets (SPEC, ADR 0058): a short-lived JWT that names the operator and
 * workspaces of the token it was minted with. Signed with a key derived from the operator key, so a
 * ticket is never an operator token and an operator token is never a ticket (different audience and
 * key). Single use is recorded by the orchestrator (OrchRead.ticketConsume), not here.
 */

export const WS_TICKET_AUDIENCE = 'kandev-ws-ticket';
const ISSUER = 'kandev';

const keys = new Map<string, Uint8Array>();
function ticketKey(operatorSecret: string): Uint8Array {
  let k = keys.get(operatorSecret);
  if (!k) {
    k = new Uint8Array(createHmac('sha256', operatorSecret).update('kandev-ws-ticket').digest());
    if (keys.size > 16) keys.clear();
    keys.set(operatorSecret, k);
  }
  return k;
}

const TicketClaims = z.object({
  sub: z.string().min(1),
  workspaces: z.array(z.string()).min(1),
  jti: z.string().min(16).max(64),
  exp: z.number(),
  /** The operator token's own expiry (epoch seconds): a ticket socket closes then, like a token socket. */
  op_exp: z.number(),
});

export interface WsTicketClaims {
  sub: string;
  workspaces: string[];
  jti: string;
  /** Epoch ms after which the ticket is refused. */
  expiresAtMs: number;
  /** Epoch ms at which the operator token it was minted from expires. */
  operatorExpiresAtMs: number;
}

/**
 * A ticket for `sub`/`workspaces`, valid `ttlMs` from `nowMs` and never past the operator token's
 * own expiry. JWT `exp` has second precision: the ticket's expiry is rounded down to a second.
 */
export async function signWsTicket(
  operatorSecret: string,
  op: { sub: string; workspaces: string[]; operatorExpiresAtMs: number },
  ttlMs: number,
  nowMs = Date.now(),
): Promise<{ ticket: string; jti: string; expiresAtMs: number }> {
  const expS = Math.floor(Math.min(nowMs + ttlMs, op.operatorExpiresAtMs) / 1000);
  const jti = randomUUID();
  const ticket = await new SignJWT({ workspaces: op.workspaces, op_exp: Math.floor(op.operatorExpiresAtMs / 1000) })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(op.sub)
    .setAudience(WS_TICKET_AUDIENCE)
    .setIssuer(ISSUER)
    .setJti(jti)
    .setIssuedAt(Math.floor(nowMs / 1000))
    .setExpirationTime(expS)
    .sign(ticketKey(operatorSecret));
  return { ticket, jti, expiresAtMs: expS * 1000 };
}

/** Signature (HS256 only), audience, issuer and expiry of a ticket; UNAUTHORIZED otherwise. Says nothing about earlier use. */
export async function verifyWsTicket(operatorSecret: string, ticket: string): Promise<WsTicketClaims> {
  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(ticket, ticketKey(operatorSecret), {
      audience: WS_TICKET_AUDIENCE,
      issuer: ISSUER,
      algorithms: ['HS256'],
      requiredClaims: ['exp', 'jti'],
      clockTolerance: 0,
    }));
  } catch (e) {
    if (e instanceof joseErrors.JWTExpired) throw unauthorized('ticket expired');
    throw unauthorized('invalid ticket');
  }
  const p = TicketClaims.safeParse(payload);
  if (!p.success) throw unauthorized('invalid ticket');
  return {
    sub: p.data.sub,
    workspaces: p.data.workspaces,
    jti: p.data.jti,
    expiresAtMs: p.data.exp * 1000,
    operatorExpiresAtMs: p.data.op_exp * 1000,
  };
}
