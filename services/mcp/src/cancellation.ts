import { createHash } from 'node:crypto';
import { McpCallCancelled } from '@kandev/contracts';
import type { Logger, NatsConnection } from '@kandev/runtime';
import type { RequestId } from '@modelcontextprotocol/sdk/types.js';

/** How a call is named across replicas: the digest of its caller's token (never the token itself, ADR 0037). */
export const callerDigest = (token: string): string => createHash('sha256').update(token).digest('hex');

/**
 * Tool calls in flight on this instance, by caller and JSON-RPC id, so that the caller's
 * `notifications/cancelled` reaches the call it names. The server is stateless: the notification
 * is a POST of its own and a load balancer may send it to another replica than the call. So a
 * cancel is applied here at once and published on `kandev.mcp.call.cancelled`, which every mcp
 * replica subscribes to (no queue group); the replica holding the call aborts it (ADR 0037).
 */
export class CallCancellations {
  private readonly calls = new Map<string, AbortController>();
  /** Resolves once the server knows this replica's subscription. */
  readonly ready: Promise<void>;

  constructor(
    private readonly nc: NatsConnection,
    private readonly instanceId: string,
    private readonly log: Logger,
  ) {
    nc.subscribe(McpCallCancelled.subject, {
      callback: (err, msg) => {
        if (err) return;
        let m: McpCallCancelled;
        try {
          m = McpCallCancelled.message.parse(msg.json());
        } catch (e) {
          // Validated on receive as on send: a malformed cancel aborts nothing.
          return void log.warn({ err: e }, 'malformed call cancellation ignored');
        }
        if (m.from_instance === instanceId) return; // applied already, when it was received
        if (this.abort(m.caller, m.request_id))
          log.info({ request_id: m.request_id, from_instance: m.from_instance }, 'tool call cancelled by its caller through another replica');
      },
    });
    this.ready = nc.flush();
  }

  private static key = (caller: string, id: RequestId) => `${caller}\n${typeof id}:${id}`;

  private abort(caller: string, id: RequestId): boolean {
    const call = this.calls.get(CallCancellations.key(caller, id));
    call?.abort(new Error('cancelled by the client'));
    return !!call;
  }

  /** The call's signal: aborted by a cancel naming it (on any replica), or by `connection` (its HTTP connection closing). */
  start(token: string, id: RequestId, connection: AbortSignal): { signal: AbortSignal; end(): void } {
    const key = CallCancellations.key(callerDigest(token), id);
    const own = new AbortController();
    this.calls.set(key, own);
    return { signal: AbortSignal.any([own.signal, connection]), end: () => this.calls.get(key) === own && this.calls.delete(key) };
  }

  /** The caller cancelled request `id`: abort it here if it runs here, and tell the other replicas. */
  cancel(token: string, id: RequestId): void {
    const caller = callerDigest(token);
    this.abort(caller, id);
    const message = McpCallCancelled.message.parse({ caller, request_id: id, from_instance: this.instanceId });
    try {
      this.nc.publish(McpCallCancelled.subject, JSON.stringify(message));
    } catch (e) {
      // NATS closed (shutting down): the call then ends with its connection, turn or deadline.
      this.log.warn({ err: e, request_id: id }, 'publishing a call cancellation failed');
    }
  }
}
