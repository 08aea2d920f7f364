// Lifecycle's events are not lost (ADR 0008): while JetStream refuses them they are kept
// in the instance's journal and published, in order, once it accepts them again, even across a
// kill -9 of the lifecycle process. The fault is real: the event stream is deleted (every publish
// fails) and recreated later.
import { Buckets, Streams, eventSubject, pingEndpoint, type EventEnvelope } from '@kandev/contracts';
import { buildEvent, ensureEventStream, EventPublisher, parseEvent, request, type NatsConnection } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';
import { type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { EventJournal } from '../src/store/event-journal.js';
import {
  FakeOrchestrator,
  eventually,
  getExecution,
  killHard,
  launch,
  launchRequest,
  log,
  natsClient,
  processGone,
  promptAt,
  script,
  spawnLifecycle,
  startLifecycle,
  tmpStateDir,
} from './helpers.js';

const cleanups: Array<() => Promise<void> | void> = [];
afterAll(async () => {
  for (const fn of cleanups.reverse()) await fn();
});

/** The ids of the events a journal's text records and does not acknowledge. */
function unacknowledged(text: string): string[] {
  const records = text
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { e?: { id: string }; a?: string });
  const acknowledged = new Set(records.flatMap((r) => (r.a ? [r.a] : [])));
  return records.flatMap((r) => (r.e && !acknowledged.has(r.e.id) ? [r.e.id] : []));
}

/** Every event stored in the stream on `type`'s subject (JetStream's view, not a core subscription). */
async function storedEvents(nc: NatsConnection, type: EventEnvelope['type']): Promise<EventEnvelope[]> {
  const jsm = await jetstreamManager(nc);
  const out: EventEnvelope[] = [];
  let seq = 0;
  for (;;) {
    const info = await jsm.streams.info(Streams.events.name).catch(() => null);
    if (!info || seq >= info.state.last_seq) return out;
    seq++;
    const m = await jsm.streams.getMessage(Streams.events.name, { seq }).catch(() => null);
    if (m && m.subject === eventSubject(type)) out.push(parseEvent(m.data));
  }
}

/** A NATS server of its own, a client and a state dir, all removed after the file's tests. */
async function world(name: string): Promise<{ nats: TestNats; nc: NatsConnection; stateDir: string }> {
  const nats = await startNats();
  const nc = await natsClient(nats.url, name);
  const stateDir = tmpStateDir();
  cleanups.push(async () => {
    await nc.close();
    await nats.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });
  return { nats, nc, stateDir };
}

describe('lifecycle event journal', () => {
  it('keeps turn.completed while JetStream refuses it, across a kill -9, and publishes it once JetStream is back', async () => {
    const { nats, nc, stateDir } = await world('journal-test');
    await FakeOrchestrator.start(nc);
    await new Kvm(nc).create(Buckets.executions, { history: 1, ttl: 30_000 });
    const env = { NATS_URL: nats.url, INSTANCE_ID: 'life-journal', KANDEV_STATE_DIR: stateDir };
    const start = async () => {
      const c: ChildProcess = await spawnLifecycle(env);
      cleanups.push(() => killHard(c));
      await eventually(
        () =>
          request(nc, pingEndpoint('lifecycle'), {}, { timeoutMs: 1_000 }).then(
            () => true,
            () => false,
          ),
        (ok) => ok,
        10_000,
      );
      return c;
    };
    const first = await start();
    const x = await launch(nc, launchRequest());
    cleanups.push(() => {
      for (const pid of [x.pid!, x.agentctl_pid!]) if (!processGone(pid)) process.kill(pid, 'SIGKILL');
    });

    // JetStream refuses every event from now on.
    const jsm = await jetstreamManager(nc);
    await jsm.streams.delete(Streams.events.name);
    const turn = randomUUID();
    await promptAt(nc, 'life-journal', { execution_id: x.execution_id, turn_id: turn, prompt: script([{ text: 'done' }]) });
    // The turn ends (lifecycle saw it) while its turn.completed cannot be published...
    await eventually(
      () => getExecution(nc, x.execution_id),
      (e) => e?.status === 'READY' && e.turn_id === null,
      15_000,
      50,
    );
    const journal = join(stateDir, 'lifecycle', 'life-journal.events.jsonl');
    await eventually(
      () => (existsSync(journal) ? readFileSync(journal, 'utf8') : ''),
      (t) => t.includes(turn) && t.includes('"turn.completed"'),
      10_000,
      50,
    );

    // ...and the instance dies before JetStream is back.
    await killHard(first);
    await ensureEventStream(nc);
    expect(await storedEvents(nc, 'turn.completed')).toEqual([]);

    // The next run with the same instance id and state dir publishes it, with its original id.
    await start();
    const completed = await eventually(
      () => storedEvents(nc, 'turn.completed'),
      (evs) => evs.length > 0,
      15_000,
      100,
    );
    expect(completed).toHaveLength(1);
    expect(completed[0]!.data).toMatchObject({ execution_id: x.execution_id, turn_id: turn, stop_reason: 'end_turn' });
    // Its start-up cleanup reports the execution the dead run left, after the journalled events.
    await eventually(
      () => storedEvents(nc, 'execution.stopped'),
      (evs) =>
        evs.some((e) => {
          const d = e.data as { execution_id?: string; how?: string };
          return d.execution_id === x.execution_id && d.how === 'lost';
        }),
      15_000,
      100,
    );
    // Nothing pending any more: every event the journal holds is acknowledged in it (a small journal
    // keeps acknowledged records; it is truncated only past a size, ADR 0050).
    await eventually(
      () => readFileSync(journal, 'utf8'),
      (t) => unacknowledged(t).length === 0,
      10_000,
      50,
    );
  }, 90_000);

  it('on start publishes exactly the recorded, unacknowledged events, skipping a torn last line', async () => {
    const { nats, nc, stateDir } = await world('journal-replay-test');
    await ensureEventStream(nc);
    const scope = { workspace_id: randomUUID(), task_id: randomUUID(), session_id: randomUUID() };
    const execution_id = randomUUID();
    const acked = buildEvent('turn.completed', scope, { execution_id, turn_id: randomUUID(), stop_reason: 'end_turn' });
    const pending = buildEvent('turn.completed', scope, { execution_id, turn_id: randomUUID(), stop_reason: 'end_turn' });
    mkdirSync(join(stateDir, 'lifecycle'), { recursive: true });
    writeFileSync(
      join(stateDir, 'lifecycle', 'life-replay.events.jsonl'),
      [JSON.stringify({ e: acked, h: {} }), JSON.stringify({ e: pending, h: {} }), JSON.stringify({ a: acked.id }), '{"e": {"id": "torn'].join('\n'),
    );
    const life = await startLifecycle(nats.url, 'life-replay', stateDir);
    cleanups.push(() => life.stop());
    const stored = await eventually(
      () => storedEvents(nc, 'turn.completed'),
      (evs) => evs.length > 0,
      15_000,
      100,
    );
    expect(stored.map((e) => e.id)).toEqual([pending.id]);
  }, 60_000);

  it('publishes each durable record only once it is on disk, in order, several records sharing one sync', async () => {
    const { nc, stateDir } = await world('journal-group-test');
    await ensureEventStream(nc);
    /** The real publisher, noting at each publish whether the event's record was in the file. */
    class Observing extends EventPublisher {
      readonly seen: Array<{ id: string; inFile: boolean }> = [];
      override async publish(event: EventEnvelope, headers?: Record<string, string>): Promise<void> {
        this.seen.push({ id: event.id, inFile: readFileSync(journal.path, 'utf8').includes(`"id":"${event.id}"`) });
        return super.publish(event, headers);
      }
    }
    const publisher = new Observing(nc);
    const journal = new EventJournal(stateDir, 'life-group', publisher, log);
    journal.open();
    const scope = { workspace_id: randomUUID(), task_id: randomUUID(), session_id: randomUUID() };
    const execution_id = randomUUID();
    const turn_id = randomUUID();
    const events = [
      buildEvent('turn.completed', scope, { execution_id, turn_id, stop_reason: 'cancelled' }),
      buildEvent('turn.started', scope, { execution_id, turn_id: randomUUID() }),
      // Streamed text is not journalled, and still keeps its place in the order.
      buildEvent('agent.message', scope, { execution_id, turn_id, text: 'bye' }),
      buildEvent('usage.recorded', scope, {
        execution_id,
        usage_event_id: randomUUID(),
        model: null,
        cost_cents: 1,
        tokens_in: 1,
        tokens_cached_in: 0,
        tokens_out: 1,
      }),
    ] as EventEnvelope[];
    // Recorded in one turn of the event loop, as a turn's end and the next turn's start can be: record() returns before any sync.
    await Promise.all(events.map((e) => journal.record(e)));
    expect(publisher.seen.map((s) => s.id)).toEqual(events.map((e) => e.id));
    expect(publisher.seen.filter((s, i) => events[i]!.type !== 'agent.message').every((s) => s.inFile)).toBe(true);
    expect(publisher.seen.find((s) => s.id === events[2]!.id)!.inFile).toBe(false);
    const stored = await storedEvents(nc, 'turn.completed');
    expect(stored.map((e) => e.id)).toEqual([events[0]!.id]);
    // Everything acknowledged: nothing is left to replay. A small file keeps its acknowledged records
    // (it is truncated only past a size); the next start finds each one acknowledged.
    expect(journal.pending).toBe(0);
    expect(readFileSync(journal.path, 'utf8')).toContain(`{"a":"${events[0]!.id}"}`);
    journal.close();
    const next = new EventJournal(stateDir, 'life-group', publisher, log);
    expect(next.open()).toBe(0);
    next.close();
  }, 30_000);

  it('empties the file once nothing is pending and it has grown past its truncation size', async () => {
    const { nc, stateDir } = await world('journal-truncate-test');
    await ensureEventStream(nc);
    const journal = new EventJournal(stateDir, 'life-truncate', new EventPublisher(nc), log);
    journal.open();
    const scope = { workspace_id: randomUUID(), task_id: randomUUID(), session_id: randomUUID() };
    const execution_id = randomUUID();
    const record = () => journal.record(buildEvent('turn.completed', scope, { execution_id, turn_id: randomUUID(), stop_reason: 'end_turn' }));
    // A few events: published and acknowledged, and left in the file.
    await Promise.all(Array.from({ length: 3 }, record));
    const small = readFileSync(journal.path, 'utf8').length;
    expect(small).toBeGreaterThan(0);
    // Queued together (the queue never drains in between) until the file is past 256 KiB: the drain empties it.
    const perEvent = small / 3;
    await Promise.all(Array.from({ length: Math.ceil((256 * 1024) / perEvent) + 10 }, record));
    expect(journal.pending).toBe(0);
    expect(readFileSync(journal.path, 'utf8')).toBe('');
    journal.close();
  }, 60_000);
});
