import { OrchRead, unauthorized, WS_TICKET_TTL_MS, type WsTicket } from '@kandev/contracts';
import { request, type NatsConnection } from '@kandev/runtime';
import { signWsTicket, verifyWsTicket } from '@kandev/runtime/ws-ticket';
import type { FastifyInstance } from 'fastify';
import type { Operator } from '../auth.js';
import { inRequestContext } from '../http/request-context.js';

/*
 * `/ws` tickets (SPEC, ADR 0058). `POST /ws/tickets` mints one for the caller's verified
 * token; `/ws?ticket=` verifies it on any replica and consumes it once through the orchestrator.
 */

export interface TicketDeps {
  nc: NatsConnection;
  operatorKey: string;
  timeoutMs: number;
  /** Ticket lifetime; WS_TICKET_TTL_MS (30 s) outside tests. */
  ttlMs?: number;
}

/** Mint a ticket bound to the operator's identity and workspaces, valid 30 s (never past the token's own expiry). */
export async function mintTicket(deps: TicketDeps, op: Operator): Promise<WsTicket> {
  const { ticket, expiresAtMs } = await signWsTicket(
    deps.operatorKey,
    { sub: op.actor.id, workspaces: op.actor.workspaces, operatorExpiresAtMs: op.expiresAt },
    deps.ttlMs ?? WS_TICKET_TTL_MS,
  );
  return { ticket, expires_at: new Date(expiresAtMs).toISOString() };
}

/**
 * A ticket → the operator it stands for, after recording its one use: UNAUTHORIZED when it is
 * forged, expired or was used before. Checked locally first, so junk never reaches the bus.
 */
export async function redeemTicket(deps: TicketDeps, ticket: string, requestId: string): Promise<Operator> {
  const claims = await verifyWsTicket(deps.operatorKey, ticket);
  const actor = { type: 'operator' as const, id: claims.sub, workspaces: claims.workspaces };
  const { first } = await request(
    deps.nc,
    OrchRead.ticketConsume,
    { actor, jti: claims.jti, expires_at: new Date(claims.expiresAtMs).toISOString() },
    { requestId, timeoutMs: deps.timeoutMs },
  );
  if (!first) throw unauthorized('ticket already used');
  return { actor, expiresAt: claims.operatorExpiresAtMs };
}

export function registerTicketRoute(app: FastifyInstance, deps: TicketDeps): void {
  app.route({
    method: 'POST',
    url: '/ws/tickets',
    config: { auth: true, traced: true },
    handler: (req, reply) =>
      inRequestContext(req, async () => {
        const op = req.kandev.operator;
        if (!op) throw Object.assign(new Error('route is missing auth: true'), { statusCode: 500 });
        return reply.code(200).send(await mintTicket(deps, op));
      }),
  });
}
