import { ROOT_CONTEXT } from '@opentelemetry/api';
import { badRequest, isKandevError, type ErrorBody } from '@kandev/contracts';
import { ATTR_ENDUSER_ID, inSpan, metrics, product, propagation, SpanKind, type Logger, type NatsConnection } from '@kandev/runtime';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { randomUUID } from 'node:crypto';
import type { RawData, WebSocket } from 'ws';
import { errorFrame, parseClientFrame, responseFrame } from '../domain/frames.js';
import { finishRequest } from '../http/request-context.js';
import { ACTIONS } from './actions.js';
import { WsClient } from './client.js';
import { startLiveFanout } from './fanout.js';
import { SubscriptionRegistry } from './subscriptions.js';

const HEARTBEAT_MS = 30_000;
/** setTimeout's ceiling; tokens living longer than ~24 days are simply not timed out early. */
const MAX_TIMER_MS = 2 ** 31 - 1;

export interface WsHubDeps {
  nc: NatsConnection;
  log: Logger;
  timeoutMs: number;
}

/**
 * Every operator socket of this process: connection lifecycle (auth already happened in
 * `onRequest`, before the upgrade), frame handling, heartbeat and the live-event fan-out.
 */
export class WsHub {
  readonly subscriptions = new SubscriptionRegistry<WsClient>();
  readonly #clients = new Set<WsClient>();
  readonly #fanout: { stop(): void };
  readonly #heartbeat: NodeJS.Timeout;

  constructor(private readonly deps: WsHubDeps) {
    this.#fanout = startLiveFanout(deps.nc, deps.log, this.subscriptions);
    this.#heartbeat = setInterval(() => this.#beat(), HEARTBEAT_MS);
    this.#heartbeat.unref();
  }

  accept(socket: WebSocket, req: FastifyRequest): void {
    const operator = req.kandev.operator;
    finishRequest(req, 101);
    if (!operator) {
      // Unreachable: the route requires auth. Fail closed all the same.
      socket.close(4401, 'unauthorized');
      return;
    }
    const id = randomUUID();
    const client = new WsClient(id, socket, operator.actor, this.deps.log.child({ ws_connection: id, operator: operator.actor.id }));
    this.#clients.add(client);
    const closed = product.wsConnectionOpened();
    client.log.info({ request_id: req.kandev.requestId }, 'websocket connected');

    let expiry: NodeJS.Timeout | undefined;
    const ms = operator.expiresAt - Date.now();
    if (ms <= MAX_TIMER_MS) {
      expiry = setTimeout(
        () => {
          client.send(errorFrame(null, null, { code: 'UNAUTHORIZED', message: 'token expired' }));
          socket.close(4401, 'token expired');
        },
        Math.max(ms, 0),
      );
      expiry.unref();
    }

    socket.on('pong', () => {
      client.alive = true;
    });
    socket.on('message', (data, isBinary) => void this.#onMessage(client, data, isBinary));
    socket.on('close', (code) => {
      closed();
      clearTimeout(expiry);
      this.#clients.delete(client);
      this.subscriptions.removeClient(client);
      client.log.info({ code }, 'websocket closed');
    });
  }

  /** Stop the fan-out and the heartbeat, and say goodbye to every socket. */
  close(): void {
    this.#fanout.stop();
    clearInterval(this.#heartbeat);
    for (const c of this.#clients) c.socket.close(1001, 'gateway shutting down');
  }

  async #onMessage(client: WsClient, data: RawData, isBinary: boolean): Promise<void> {
    if (isBinary) return client.send(errorFrame(null, null, { code: 'BAD_REQUEST', message: 'binary frames are not supported' }));
    const parsed = parseClientFrame(textOf(data));
    if (!parsed.ok) return client.send(parsed.error);
    const { frame } = parsed;
    const handler = ACTIONS.get(frame.action);
    if (!handler)
      return client.send(
        errorFrame(frame.id, frame.action, { code: 'UNKNOWN_ACTION', message: `unknown action ${JSON.stringify(frame.action.slice(0, 100))}` }),
      );

    const requestId = randomUUID();
    const parent = frame.traceparent ? propagation.extract(ROOT_CONTEXT, { traceparent: frame.traceparent }) : ROOT_CONTEXT;
    const started = performance.now();
    const log = client.log.child({ request_id: requestId, action: frame.action });
    try {
      const result = await inSpan(
        `WS ${frame.action}`,
        { kind: SpanKind.SERVER, parent, attributes: { 'kandev.ws.action': frame.action, 'kandev.request_id': requestId, [ATTR_ENDUSER_ID]: client.actor.id } },
        () =>
          handler(frame.payload, {
            actor: client.actor,
            client,
            requestId,
            nc: this.deps.nc,
            timeoutMs: this.deps.timeoutMs,
            subscriptions: this.subscriptions,
          }),
      );
      log.info({ outcome: 'ok', duration_ms: elapsed(started) }, 'websocket request');
      metrics.wsActionDuration.observe({ action: frame.action, code: 'OK' }, (performance.now() - started) / 1000);
      client.send(responseFrame(frame.id, frame.action, result));
    } catch (e) {
      const body: ErrorBody = isKandevError(e) ? e.toBody() : { code: 'INTERNAL_ERROR', message: 'internal error' };
      metrics.wsActionDuration.observe({ action: frame.action, code: body.code }, (performance.now() - started) / 1000);
      if (!isKandevError(e)) log.error({ err: e }, 'websocket action failed');
      else log.info({ outcome: body.code, duration_ms: elapsed(started) }, 'websocket request');
      client.send(errorFrame(frame.id, frame.action, body));
    }
  }

  #beat(): void {
    for (const c of this.#clients) {
      if (!c.alive) {
        c.log.info('terminating unresponsive websocket');
        c.socket.terminate();
        continue;
      }
      c.alive = false;
      c.socket.ping();
    }
  }
}

const elapsed = (started: number) => Math.round((performance.now() - started) * 10) / 10;

function textOf(data: RawData): string {
  if (Buffer.isBuffer(data)) return data.toString('utf8');
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.from(data).toString('utf8');
}

/**
 * `/ws`: the token (header, a single-use `?ticket=` (ADR 0058), or the discouraged `?token=`) is verified in `onRequest`, so an unauthenticated upgrade
 * is answered with a plain HTTP 401 and never becomes a socket. A GET without upgrade is a 400.
 */
export function registerWebSocketRoute(app: FastifyInstance, hub: WsHub): void {
  app.route({
    method: 'GET',
    url: '/ws',
    config: { auth: true, queryToken: true, traced: true },
    handler: async () => {
      throw badRequest('/ws expects a WebSocket upgrade');
    },
    wsHandler: (socket, req) => hub.accept(socket, req),
  });
}
