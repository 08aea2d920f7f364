import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiClient } from '@kandev/testkit';
import { startWorld, type World } from './support.js';

/**
 * ADR 0058 across gateway replicas (B-6): a ticket minted by one gateway opens /ws on another, and
 * once used there it is refused by both: the single use is recorded by the orchestrator, not in a
 * gateway's memory.
 */
let w: World;
let replicaHttp: string;
beforeAll(async () => {
  w = await startWorld();
  const replica = await w.stack.addReplica('gateway');
  replicaHttp = replica.urls.http!;
}, 120_000);
afterAll(async () => w?.stop());

/** The open socket, or the refusal's HTTP status. */
function open(httpBase: string, ticket: string): Promise<WebSocket | number> {
  return new Promise((resolve) => {
    const s = new WebSocket(`${httpBase.replace(/^http/, 'ws')}/ws?ticket=${encodeURIComponent(ticket)}`);
    s.once('open', () => resolve(s));
    s.once('unexpected-response', (req, res) => {
      req.destroy();
      resolve(res.statusCode ?? 0);
    });
    s.once('error', () => undefined);
  });
}

describe('/ws tickets across gateway replicas', () => {
  it('minted on one replica, used on the other, then refused on both', async () => {
    expect(replicaHttp).toBeDefined();
    expect(replicaHttp).not.toBe(w.stack.gatewayUrl);
    const minted = await new ApiClient(w.stack.gatewayUrl, w.token).post('/ws/tickets', undefined);
    expect(minted.status).toBe(200);
    const socket = await open(replicaHttp, minted.body.ticket);
    expect(socket).toBeInstanceOf(WebSocket);
    (socket as WebSocket).close();
    expect(await open(replicaHttp, minted.body.ticket)).toBe(401);
    expect(await open(w.stack.gatewayUrl, minted.body.ticket)).toBe(401);

    // The other way round, racing: both replicas at once, one wins.
    const second = await new ApiClient(replicaHttp, w.token).post('/ws/tickets', undefined);
    const results = await Promise.all([open(w.stack.gatewayUrl, second.body.ticket), open(replicaHttp, second.body.ticket)]);
    expect(results.filter((r) => r instanceof WebSocket)).toHaveLength(1);
    expect(results.filter((r) => r === 401)).toHaveLength(1);
    for (const r of results) if (r instanceof WebSocket) r.close();
  });
});
