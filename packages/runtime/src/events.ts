import { headers as natsHeaders, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager, type JetStreamClient, type JsMsg } from '@nats-io/jetstream';
import { EventData, EventEnvelope, Headers, Streams, eventSubject, type Actor, type EventDataOf, type EventType } from '@kandev/contracts';
import { randomUUID } from 'node:crypto';
import type { Logger } from './log.js';
import { metrics } from './metrics.js';
import { activity } from './stalls.js';
import { whenPlaceable } from './placement.js';
import { linkOf, type NatsLink } from './nats.js';
import { SpanKind, context, extractTrace, inSpan, injectTrace } from './tracing.js';
import { ATTR_MESSAGING_BATCH_MESSAGE_COUNT, ATTR_MESSAGING_CONSUMER_GROUP_NAME, messagingSpan } from './semconv.js';

const enc = new TextEncoder();
const dec = new TextDecoder();

/** How long the event stream keeps a message (its `max_age` as this service creates it). */
export const EVENT_RETENTION_MS = 7 * 24 * 3600 * 1_000;

/**
 * Make sure the event stream exists. Created with `replicas` and the settings below when missing.
 * An existing stream is not re-configured wholesale (that undid operators' changes at every start):
 * only subjects of ours it lacks are added, keeping everything else; a replica count other than the
 * configured one is reported, not changed (changing it moves data: an operator's decision).
 */
export async function ensureEventStream(nc: NatsConnection, opts: { replicas?: number; log?: Logger; placementWaitMs?: number } = {}): Promise<void> {
  const jsm = await jetstreamManager(nc);
  const replicas = opts.replicas ?? 1;
  const cfg = {
    name: Streams.events.name,
    subjects: [...Streams.events.subjects],
    // Dedupe window for Nats-Msg-Id: retries of the same event within it are stored once.
    duplicate_window: 120 * 1_000_000_000,
    max_age: EVENT_RETENTION_MS * 1_000_000,
    num_replicas: replicas,
  };
  // Any failure to read it (not found, or not reachable yet) leads to the add below, whose error is the one thrown.
  const existing = await jsm.streams.info(cfg.name).catch(() => null);
  if (!existing) {
    try {
      await whenPlaceable(() => jsm.streams.add(cfg), { what: `stream ${cfg.name}`, log: opts.log, waitMs: opts.placementWaitMs });
      return;
    } catch (e) {
      // Another replica created it between our info and add.
      if (!(await jsm.streams.info(cfg.name).catch(() => null))) throw e;
      return;
    }
  }
  const missing = cfg.subjects.filter((s) => !existing.config.subjects?.includes(s));
  if (missing.length) {
    await jsm.streams.update(cfg.name, { ...existing.config, subjects: [...(existing.config.subjects ?? []), ...missing] });
    opts.log?.info({ stream: cfg.name, added_subjects: missing }, 'event stream: added missing subjects');
  }
  if (existing.config.num_replicas !== replicas) {
    opts.log?.warn(
      { stream: cfg.name, replicas: existing.config.num_replicas, configured_replicas: replicas },
      'event stream has a different replica count than KANDEV_JS_REPLICAS; left as is',
    );
  }
}

export interface EventScope {
  workspace_id: string;
  task_id?: string | null;
  session_id?: string | null;
  actor?: Actor | null;
}

/** Build a validated envelope; the id doubles as the JetStream Nats-Msg-Id. */
export function buildEvent<T extends EventType>(type: T, scope: EventScope, data: EventDataOf<T>, id: string = randomUUID()): EventEnvelope<T> {
  const checked = EventData[type].parse(data) as EventDataOf<T>;
  return {
    id,
    type,
    version: 1,
    occurred_at: new Date().toISOString(),
    workspace_id: scope.workspace_id,
    task_id: scope.task_id ?? null,
    session_id: scope.session_id ?? null,
    actor: scope.actor ?? null,
    data: checked,
  };
}

/** How long a publish waits for a connection that is down before it fails (the relay or the journal publishes it later). */
const PUBLISH_CONNECTION_WAIT_MS = 5_000;

/** Publishes envelopes on JetStream with msgID = event id, trace context in the headers. */
export class EventPublisher {
  private readonly js: JetStreamClient;
  private readonly link: NatsLink | undefined;
  constructor(nc: NatsConnection) {
    this.js = jetstream(nc);
    this.link = linkOf(nc);
  }
  async publish(event: EventEnvelope, traceHeaders?: Record<string, string>): Promise<void> {
    // Published while the connection is down, it would be dropped at the next reconnect attempt and
    // fail only at the acknowledgement's timeout, then wait for the relay (ADR 0014).
    if (this.link && !this.link.connected) await this.link.sendable(PUBLISH_CONNECTION_WAIT_MS, `event ${event.id}`);
    const h: MsgHdrs = natsHeaders();
    if (traceHeaders && Object.keys(traceHeaders).length) for (const [k, v] of Object.entries(traceHeaders)) h.set(k, v);
    else injectTrace(h);
    await this.js.publish(eventSubject(event.type), enc.encode(JSON.stringify(event)), { msgID: event.id, headers: h });
  }
  async emit<T extends EventType>(type: T, scope: EventScope, data: EventDataOf<T>): Promise<EventEnvelope<T>> {
    const ev = buildEvent(type, scope, data);
    await this.publish(ev as EventEnvelope);
    return ev;
  }
}

export function parseEvent(data: Uint8Array): EventEnvelope {
  const raw = EventEnvelope.parse(JSON.parse(dec.decode(data)));
  const schema = EventData[raw.type as EventType];
  if (!schema) return raw as EventEnvelope;
  return { ...raw, data: schema.parse(raw.data) } as EventEnvelope;
}

export interface ConsumerOptions {
  /** Durable name, one per (service, purpose); replicas share it and split the work. */
  durable: string;
  /** Event types to receive; NATS 2.9 allows one filter subject per consumer, so several types = `kandev.evt.>` filtered here. */
  types: readonly EventType[];
  /** The consumer's filter subject when the types share a narrower one than `kandev.evt.>` (e.g. `kandev.evt.agent.>`). */
  filterSubject?: string;
  log: Logger;
  /** Redelivery delay after a failed handler. */
  retryDelayMs?: number;
  maxDeliver?: number;
}

export interface RunningConsumer {
  stop(): Promise<void>;
}

/** Creates the durable consumer when missing (a replica that loses the race uses the one that won). */
async function ensureConsumer(nc: NatsConnection, opts: ConsumerOptions) {
  const jsm = await jetstreamManager(nc);
  const filter = opts.filterSubject ?? (opts.types.length === 1 ? eventSubject(opts.types[0]!) : 'kandev.evt.>');
  const cfg = {
    durable_name: opts.durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.New,
    filter_subject: filter,
    ack_wait: 30 * 1_000_000_000,
    max_deliver: opts.maxDeliver ?? -1,
    max_ack_pending: 1000,
  };
  try {
    await jsm.consumers.info(Streams.events.name, opts.durable);
  } catch {
    await jsm.consumers.add(Streams.events.name, cfg).catch(async (e) => {
      await jsm.consumers.info(Streams.events.name, opts.durable).catch(() => {
        throw e;
      });
    });
  }
  return jetstream(nc).consumers.get(Streams.events.name, opts.durable);
}

/**
 * The event a message carries when the consumer wants it, or null once the message is settled
 * unread: acked when it is of a type not wanted, terminated when it is malformed.
 */
function eventOf(m: JsMsg, opts: ConsumerOptions, wantedSubjects: ReadonlySet<string>, wanted: ReadonlySet<string>): EventEnvelope | null {
  // Several types share the `kandev.evt.>` filter: every other event of the stream arrives too. Its
  // subject names its type (`publish`), so it is acked unread: validating each one against its
  // schema first cost every consumer a parse of every event (a tree pause with a hundred live
  // sessions publishes several hundred it does not want).
  if (!wantedSubjects.has(m.subject)) {
    m.ack();
    return null;
  }
  let ev: EventEnvelope;
  try {
    ev = parseEvent(m.data);
  } catch (e) {
    opts.log.error({ err: e, subject: m.subject }, 'dropping malformed event');
    metrics.eventsHandled.inc({ consumer: opts.durable, outcome: 'malformed' });
    m.term();
    return null;
  }
  if (!wanted.has(ev.type)) {
    m.ack();
    return null;
  }
  if (m.info.deliveryCount > 1) metrics.eventsRedelivered.inc({ consumer: opts.durable });
  return ev;
}

/**
 * A durable pull consumer. The handler must commit its effect (idempotently: see Inbox) before it
 * returns; the message is then acked with ackAck(). A failing handler naks with a delay.
 */
export async function consumeEvents(nc: NatsConnection, opts: ConsumerOptions, handler: (ev: EventEnvelope) => Promise<void>): Promise<RunningConsumer> {
  const consumer = await ensureConsumer(nc, opts);
  const wanted = new Set<string>(opts.types);
  const wantedSubjects = new Set<string>(opts.types.map((t) => eventSubject(t)));
  const messages = await consumer.consume({ max_messages: 256, expires: 5_000 });
  const loop = (async () => {
    for await (const m of messages) await handleOne(m);
  })();

  async function handleOne(m: JsMsg): Promise<void> {
    const ev = eventOf(m, opts, wantedSubjects, wanted);
    if (!ev) return;
    const parent = extractTrace(m.headers);
    try {
      const subject = eventSubject(ev.type);
      const span = messagingSpan('process', subject, subject, { [ATTR_MESSAGING_CONSUMER_GROUP_NAME]: opts.durable });
      await activity(`consume ${opts.durable}`, async () => {
        await inSpan(span.name, { kind: SpanKind.CONSUMER, parent, attributes: span.attributes }, () => handler(ev));
        await m.ackAck().catch(() => m.ack());
      });
      metrics.eventsHandled.inc({ consumer: opts.durable, outcome: 'ok' });
    } catch (e) {
      opts.log.warn({ err: e, event_id: ev.id, type: ev.type, task_id: ev.task_id, delivery: m.info.deliveryCount }, 'event handler failed; will retry');
      metrics.eventsHandled.inc({ consumer: opts.durable, outcome: 'retry' });
      m.nak(opts.retryDelayMs ?? 500);
    }
  }
  return {
    async stop() {
      // Stopping: a consumer already closed by the server, or a loop that ended on an error it logged, changes nothing.
      await messages.close().catch(() => undefined);
      await loop.catch(() => undefined);
    },
  };
}

export interface BatchConsumerOptions extends ConsumerOptions {
  /** The most messages taken from the consumer for one round of handler calls. */
  maxBatch?: number;
  /** Events with the same key go to one handler call, in delivery order; events of different keys never share one. */
  groupBy: (ev: EventEnvelope) => string;
}

/**
 * A durable pull consumer that hands its handler runs of events instead of one event at a time:
 * whatever has arrived (up to `maxBatch`) is split by `groupBy`, keeping each group's delivery
 * order, and each group is one handler call. Nothing waits to fill a batch: a lone event is a group
 * of one. A group's messages are acked after its handler returns (its effect committed), every one
 * of them nakked when it throws; the groups of a round run one after another.
 *
 * What it is for: a handler whose per-event cost is mostly its transaction (the transcript: one
 * agent's chunks, ADR 0035). Exactly-once per event id stays the handler's (recordOnce).
 */
export async function consumeEventBatches(
  nc: NatsConnection,
  opts: BatchConsumerOptions,
  handler: (evs: EventEnvelope[]) => Promise<void>,
): Promise<RunningConsumer> {
  const consumer = await ensureConsumer(nc, opts);
  const wanted = new Set<string>(opts.types);
  const wantedSubjects = new Set<string>(opts.types.map((t) => eventSubject(t)));
  const maxBatch = opts.maxBatch ?? 100;
  // The client's callback cannot wait: it queues, and the loop below takes what has queued. What
  // the queue can hold is bounded by the consumer's max_ack_pending (nothing queued is acked yet).
  const queue: JsMsg[] = [];
  let wake: (() => void) | null = null;
  let stopping = false;
  const messages = await consumer.consume({
    max_messages: 256,
    expires: 5_000,
    callback: (m) => {
      queue.push(m);
      wake?.();
    },
  });
  const loop = (async () => {
    while (!stopping) {
      if (!queue.length) {
        await new Promise<void>((resolve) => (wake = resolve));
        wake = null;
        continue;
      }
      await handleRound(queue.splice(0, maxBatch));
    }
  })();

  async function handleRound(batch: JsMsg[]): Promise<void> {
    const groups = new Map<string, Array<{ m: JsMsg; ev: EventEnvelope }>>();
    for (const m of batch) {
      const ev = eventOf(m, opts, wantedSubjects, wanted);
      if (!ev) continue;
      const key = opts.groupBy(ev);
      const g = groups.get(key);
      if (g) g.push({ m, ev });
      else groups.set(key, [{ m, ev }]);
    }
    for (const group of groups.values()) await handleGroup(group);
  }

  async function handleGroup(group: Array<{ m: JsMsg; ev: EventEnvelope }>): Promise<void> {
    const first = group[0]!;
    const parent = extractTrace(first.m.headers);
    try {
      const subject = eventSubject(first.ev.type);
      const span = messagingSpan('process', subject, subject, {
        [ATTR_MESSAGING_CONSUMER_GROUP_NAME]: opts.durable,
        [ATTR_MESSAGING_BATCH_MESSAGE_COUNT]: group.length,
      });
      await activity(`consume ${opts.durable}`, async () => {
        await inSpan(span.name, { kind: SpanKind.CONSUMER, parent, attributes: span.attributes }, () => handler(group.map((x) => x.ev)));
        // Acked together after the commit; one lost ack only means a redelivery the handler absorbs.
        await Promise.all(group.map(({ m }) => m.ackAck().catch(() => m.ack())));
      });
      metrics.eventsHandled.inc({ consumer: opts.durable, outcome: 'ok' }, group.length);
    } catch (e) {
      opts.log.warn(
        { err: e, event_ids: group.map((x) => x.ev.id), type: first.ev.type, task_id: first.ev.task_id, delivery: first.m.info.deliveryCount },
        'event handler failed; will retry',
      );
      metrics.eventsHandled.inc({ consumer: opts.durable, outcome: 'retry' }, group.length);
      for (const { m } of group) m.nak(opts.retryDelayMs ?? 500);
    }
  }
  return {
    async stop() {
      stopping = true;
      await messages.close().catch(() => undefined);
      wake?.();
      await loop.catch(() => undefined);
      // Queued but not handled: handed back now rather than after the ack wait, to a replica still consuming.
      for (const m of queue.splice(0)) m.nak();
    },
  };
}

/**
 * Ephemeral fan-out of live events (core subscription): what the gateway pushes to sockets.
 * `wants(subject)` is asked before an event is decoded: a teardown of a hundred sessions publishes
 * hundreds of events, and one nobody watches is not worth its JSON parse and schema check.
 */
export function subscribeLiveEvents(
  nc: NatsConnection,
  log: Logger,
  onEvent: (ev: EventEnvelope) => void,
  wants: (subject: string) => boolean = () => true,
): { unsubscribe(): void } {
  const sub = nc.subscribe('kandev.evt.>', {
    callback: (err, msg) => {
      if (err || !wants(msg.subject)) return;
      try {
        const ev = parseEvent(msg.data);
        context.with(extractTrace(msg.headers), () => onEvent(ev));
      } catch (e) {
        log.warn({ err: e }, 'ignoring malformed live event');
      }
    },
  });
  return { unsubscribe: () => sub.unsubscribe() };
}

export { Headers };
