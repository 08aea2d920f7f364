import type { EventEnvelope } from '@kandev/contracts';
import { EventEnvelope as EventEnvelopeSchema } from '@kandev/contracts';
import { injectTrace, type EventPublisher, type Logger } from '@kandev/runtime';
import { headers as natsHeaders } from '@nats-io/nats-core';
import {
  appendFileSync,
  closeSync,
  fdatasync,
  fdatasyncSync,
  ftruncateSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import { dirname, join } from 'node:path';

/*
 * The lifecycle's event outbox (ADR 0008). Lifecycle has no database; what it reports about its
 * agents (turn.completed, execution.stopped, usage.recorded, ...) is written to an append-only
 * file in its own state dir — fsynced — before it is published, and published (in order, with the
 * event id as JetStream msg id) until JetStream acknowledges it. A restart with the same instance
 * id and state dir publishes what the previous run had recorded but not seen acknowledged.
 * Consumers dedupe by event id (the orchestrator's inbox), so a replay is harmless.
 *
 * `${KANDEV_STATE_DIR}/lifecycle/${instanceId}.events.jsonl`, one JSON object a line:
 *   {"e": <EventEnvelope>, "h": {<trace headers>}}   recorded, to publish
 *   {"a": "<event id>"}                               acknowledged by JetStream
 * Rewritten (temp + rename) with only the unacknowledged records once it grows past COMPACT_BYTES,
 * truncated when nothing is pending and it has grown past TRUNCATE_BYTES. Records are fsynced;
 * acknowledgements and truncation are not (losing one in a crash only replays an event, which
 * consumers dedupe by id).
 *
 * The fsync is a group commit off the event loop: records appended in one turn of the loop share
 * one fdatasync, run on libuv's thread pool at the end of that turn, and each is published only
 * once its fdatasync returned. A synchronous fsync per record blocked the lifecycle for every
 * event, and a cancel's reply waited behind its two (turn.completed, session.agent.cancelled).
 */

/** Events whose loss leaves state wrong (a session RUNNING forever, a turn never closed, cost missing). */
const DURABLE: ReadonlySet<string> = new Set([
  'turn.started',
  'turn.completed',
  'execution.registered',
  'execution.ready',
  'execution.stopped',
  'usage.recorded',
]);
/** Streamed text is not journalled (one fsync per chunk); it still goes out in order, best effort. */
const MAX_VOLATILE_PENDING = 10_000;
const COMPACT_BYTES = 4 * 1024 * 1024;
/**
 * An empty queue truncates the file only past this size. Truncating at every drain cost an ext4
 * truncate (and its journal commit) each time the queue ran dry, which during a tree pause's
 * teardown is after nearly every event: about 7 % of the lifecycle's CPU in that window. What an
 * acknowledged file holds costs only its reading at the next start (open() replays nothing from it).
 */
const TRUNCATE_BYTES = 256 * 1024;
const MAX_BACKOFF_MS = 2_000;

interface Pending {
  event: EventEnvelope;
  headers: Record<string, string>;
  durable: boolean;
  /** Settles once the record is on disk (its group's fdatasync returned); null when it already is, or is not journalled. */
  synced: Promise<void> | null;
  /** Resolved once JetStream acknowledged it, or once the first attempt failed (the pump keeps trying). */
  settled: () => void;
}

export class EventJournal {
  readonly path: string;
  private fd: number | null = null;
  private readonly queue: Pending[] = [];
  private pumping = false;
  private closed = false;
  private wake: (() => void) | null = null;
  private bytes = 0;
  /** The last publish failed: callers are not held up until one succeeds again. */
  private outage = false;
  /** The fdatasync that will cover records appended now (it starts at the end of this turn of the event loop). */
  private nextSync: Promise<void> | null = null;

  constructor(
    stateDir: string,
    instanceId: string,
    private readonly publisher: EventPublisher,
    private readonly log: Logger,
  ) {
    this.path = join(stateDir, 'lifecycle', `${instanceId}.events.jsonl`);
  }

  get pending(): number {
    return this.queue.length;
  }

  /**
   * Load what a previous run recorded and never saw acknowledged, and start publishing it. Returns
   * how many events it found. An unreadable line (a torn write at a crash) is skipped and logged.
   */
  open(): number {
    mkdirSync(dirname(this.path), { recursive: true });
    let text = '';
    try {
      text = readFileSync(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    }
    const recorded = new Map<string, { event: EventEnvelope; headers: Record<string, string> }>();
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      try {
        const rec = JSON.parse(line) as { e?: unknown; h?: Record<string, string>; a?: string };
        if (rec.a) recorded.delete(rec.a);
        else if (rec.e) {
          const event = EventEnvelopeSchema.parse(rec.e) as EventEnvelope;
          recorded.set(event.id, { event, headers: rec.h ?? {} });
        }
      } catch (e) {
        this.log.warn({ err: e, path: this.path }, 'skipping an unreadable event journal line (torn write at a crash?)');
      }
    }
    // Start from a file that holds exactly what is pending.
    this.rewrite([...recorded.values()]);
    for (const r of recorded.values()) this.queue.push({ ...r, durable: true, synced: null, settled: () => undefined });
    if (recorded.size) this.log.warn({ events: recorded.size, path: this.path }, 'publishing events a previous run recorded but never saw acknowledged');
    this.kick();
    return recorded.size;
  }

  /**
   * Record the event (durably, for the types that need it) and queue it for publishing. Resolves
   * once JetStream acknowledged it, or once a first attempt failed: the caller is never held up by
   * an outage, and the event is not lost to it.
   */
  async record(event: EventEnvelope): Promise<void> {
    if (this.closed) {
      // A teardown that finished after shutdown closed us: keep the event for the next start.
      if (DURABLE.has(event.type)) appendFileSync(this.path, JSON.stringify({ e: event, h: {} }) + '\n');
      return;
    }
    if (this.fd === null) throw new Error('event journal is not open');
    const h = natsHeaders();
    injectTrace(h);
    const headers: Record<string, string> = {};
    for (const k of h.keys()) headers[k] = h.get(k);
    const durable = DURABLE.has(event.type);
    let synced: Promise<void> | null = null;
    if (durable) {
      this.append({ e: event, h: headers });
      synced = this.syncSoon();
    } else if (this.queue.filter((p) => !p.durable).length >= MAX_VOLATILE_PENDING) {
      this.log.warn({ type: event.type, event_id: event.id }, 'publish backlog full; dropping a streamed event');
      return;
    }
    return new Promise<void>((settled) => {
      this.queue.push({ event, headers, durable, synced, settled });
      if (this.outage) settled();
      this.kick();
    });
  }

  /** Stop publishing (shutdown). What is still pending stays in the file for the next start. */
  close(): void {
    this.closed = true;
    this.wake?.();
    for (const p of this.queue) p.settled();
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  /** Resolves once nothing is pending or `timeoutMs` passed; returns whether it drained. */
  async drain(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (this.queue.length && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    return this.queue.length === 0;
  }

  private kick(): void {
    if (this.pumping || this.closed) return;
    this.pumping = true;
    void this.pump().finally(() => {
      this.pumping = false;
      // Queued after the loop's last look at the queue and before this: nobody else pumps it.
      if (this.queue.length) this.kick();
    });
  }

  /** One at a time, in order: a later event never overtakes an earlier one that failed. */
  private async pump(): Promise<void> {
    let failures = 0;
    while (this.queue.length && !this.closed) {
      const head = this.queue[0]!;
      // Never published before it is on disk: a crash after the publish must still find it.
      if (head.synced) await head.synced;
      try {
        await this.publisher.publish(head.event, head.headers);
      } catch (e) {
        failures++;
        this.outage = true;
        // Everything queued behind the head waits for it: release those callers too.
        for (const p of this.queue) p.settled();
        if (failures === 1 || failures % 20 === 0)
          this.log.warn(
            { err: e, event_id: head.event.id, type: head.event.type, attempt: failures, pending: this.queue.length },
            'event publish failed; retrying until JetStream acknowledges',
          );
        await this.sleep(Math.min(MAX_BACKOFF_MS, 50 * 2 ** Math.min(failures, 6)));
        continue;
      }
      if (failures) this.log.info({ event_id: head.event.id, attempts: failures + 1 }, 'event published after retries');
      failures = 0;
      this.outage = false;
      this.queue.shift();
      // Not fsynced: an acknowledgement lost in a crash only means one harmless replay (same id).
      if (head.durable) this.append({ a: head.event.id });
      head.settled();
      if (this.queue.length === 0 && this.bytes > TRUNCATE_BYTES) this.truncate();
      else if (this.queue.length > 0 && this.bytes > COMPACT_BYTES) this.rewrite(this.queue.filter((p) => p.durable));
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((r) => {
      const t = setTimeout(r, ms);
      this.wake = () => {
        clearTimeout(t);
        this.wake = null;
        r();
      };
    });
  }

  /** Written, not yet synced: `syncSoon` makes it durable. */
  private append(rec: object): void {
    if (this.fd === null) return;
    const line = JSON.stringify(rec) + '\n';
    writeSync(this.fd, line);
    this.bytes += Buffer.byteLength(line);
  }

  /**
   * The group commit: one fdatasync, on the thread pool at the end of this turn of the event loop,
   * covering every record written before it starts. Never rejects: a record that could not be
   * synced is still published (it would only be lost to a crash before its acknowledgement), and
   * said loudly. A sync overtaken by a compaction (which closed its fd) is not needed: the
   * compacted file, synced, holds every pending record.
   */
  private syncSoon(): Promise<void> {
    return (this.nextSync ??= new Promise<void>((resolve) =>
      setImmediate(() => {
        this.nextSync = null;
        const fd = this.fd;
        if (fd === null) return resolve();
        fdatasync(fd, (err) => {
          if (err && fd === this.fd)
            this.log.error({ err, path: this.path }, 'event journal could not be synced; its latest records would not survive a crash');
          resolve();
        });
      }),
    ));
  }

  /** Nothing pending: empty the file (the fd appends, so later writes start at 0 again). */
  private truncate(): void {
    if (this.fd === null || this.bytes === 0) return;
    ftruncateSync(this.fd, 0);
    this.bytes = 0;
  }

  /** Replace the file with exactly these records (atomic: temp file, fsync, rename). */
  private rewrite(records: ReadonlyArray<{ event: EventEnvelope; headers: Record<string, string> }>): void {
    const tmp = `${this.path}.${process.pid}.tmp`;
    const body = records.map((r) => JSON.stringify({ e: r.event, h: r.headers }) + '\n').join('');
    writeFileSync(tmp, body);
    const tfd = openSync(tmp, 'r+');
    fdatasyncSync(tfd);
    closeSync(tfd);
    renameSync(tmp, this.path);
    if (this.fd !== null) closeSync(this.fd);
    this.fd = this.closed ? null : openSync(this.path, 'a');
    this.bytes = statSync(this.path).size;
  }
}
