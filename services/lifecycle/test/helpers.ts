import { Life, Orch, type EventEnvelope, type EventType, type Execution, type LaunchRequest, type RequestOf, type ResultOf } from '@kandev/contracts';
import {
  connectNats,
  createLogger,
  on,
  parseEvent,
  RegistryReader,
  request,
  serveEndpoints,
  startService,
  type NatsConnection,
  type RunningService,
} from '@kandev/runtime';
import { Svcm } from '@nats-io/services';
import { serviceEntry, workerAgentUidRange } from '@kandev/testkit';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { lifecycleService } from '../src/service.js';

export const log = createLogger('lifecycle-test', 'silent');

export function tmpStateDir(): string {
  return mkdtempSync(join(tmpdir(), 'kandev-life-'));
}

export async function startLifecycle(natsUrl: string, instanceId: string, stateDir: string, extra: Record<string, string> = {}): Promise<RunningService> {
  const running = await startService(lifecycleService, {
    ...process.env,
    NATS_URL: natsUrl,
    INSTANCE_ID: instanceId,
    KANDEV_STATE_DIR: stateDir,
    AGENT_UID_RANGE: workerAgentUidRange(),
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    CANCEL_TIMEOUT_MS: '1500',
    TEARDOWN_GRACE_MS: '1000',
    ...extra,
  });
  // serve() subscribes without a flush; make sure the server has the subscriptions before a test
  // sends its first request (otherwise a fast request can meet "no responders").
  await running.runtime.nc.flush();
  return running;
}

export type AdmitRequest = RequestOf<typeof Orch.executionAdmit>;

/** The orchestrator, faked at the subject level: answers the launch fence as the test says. */
type AdmitVerdict = { admitted: boolean; reason: string | null };

export class FakeOrchestrator {
  readonly admitted: AdmitRequest[] = [];
  /** The verdict; a promise holds the launch in its admission step until it settles. */
  decide: (req: AdmitRequest) => AdmitVerdict | Promise<AdmitVerdict> = () => ({ admitted: true, reason: null });
  private constructor() {}
  static async start(nc: NatsConnection): Promise<FakeOrchestrator> {
    const fake = new FakeOrchestrator();
    await serveEndpoints(nc, { service: 'orchestrator', instanceId: 'fake-orch', queue: 'orchestrator', log }, [
      on(Orch.executionAdmit, async (req) => {
        fake.admitted.push(req);
        return fake.decide(req);
      }),
    ]);
    await nc.flush();
    return fake;
  }
}

/** Every event published on kandev.evt.>, through a plain core subscription. */
export class EventLog {
  readonly events: EventEnvelope[] = [];
  private waiters: Array<() => void> = [];
  constructor(nc: NatsConnection) {
    nc.subscribe('kandev.evt.>', {
      callback: (err, msg) => {
        if (err) return;
        this.events.push(parseEvent(msg.data));
        this.waiters.splice(0).forEach((w) => w());
      },
    });
  }
  of<T extends EventType>(type: T, executionId?: string): EventEnvelope<T>[] {
    return this.events.filter(
      (e) =>
        e.type === type &&
        (executionId === undefined ||
          (e.data as { execution_id?: string; execution?: { execution_id: string } }).execution_id === executionId ||
          (e.data as { execution?: { execution_id: string } }).execution?.execution_id === executionId),
    ) as EventEnvelope<T>[];
  }
  async waitFor<T extends EventType>(type: T, match: (e: EventEnvelope<T>) => boolean = () => true, timeoutMs = 15_000): Promise<EventEnvelope<T>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.of(type).find(match);
      if (hit) return hit;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no ${type} event within ${timeoutMs} ms; saw: ${this.events.map((e) => e.type).join(', ')}`);
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }
}

export function launchRequest(overrides: Partial<LaunchRequest> = {}): LaunchRequest {
  return {
    execution_id: randomUUID(),
    task_id: randomUUID(),
    session_id: randomUUID(),
    workspace_id: randomUUID(),
    agent: 'scripted-acp',
    fence_epoch: 1,
    mcp_mode: 'task',
    ...overrides,
  };
}

export const launch = (nc: NatsConnection, req: LaunchRequest) => request(nc, Life.launch, req, { timeoutMs: 20_000 });
export const promptAt = (nc: NatsConnection, instance: string, req: RequestOf<typeof Life.prompt>) =>
  request(nc, Life.prompt.at(instance), req, { timeoutMs: 10_000 });
export const cancelAt = (nc: NatsConnection, instance: string, req: RequestOf<typeof Life.cancel>): Promise<ResultOf<typeof Life.cancel>> =>
  request(nc, Life.cancel.at(instance), req, { timeoutMs: 15_000 });
export const stopAt = (nc: NatsConnection, instance: string, req: RequestOf<typeof Life.stop>) =>
  request(nc, Life.stop.at(instance), req, { timeoutMs: 10_000 });
export const stopManyAt = (nc: NatsConnection, instance: string, req: RequestOf<typeof Life.stopMany>) =>
  request(nc, Life.stopMany.at(instance), req, { timeoutMs: 10_000 });
// Registry reads are one KV round trip; the 15 s bound is headroom for a busy 2-core machine (
// the 5 s default timed out under a full `npm test`), not an expectation.
export const getExecution = (nc: NatsConnection, executionId: string) => request(nc, Life.get, { execution_id: executionId }, { timeoutMs: 15_000 });
export const listExecutions = (nc: NatsConnection, taskId: string) => request(nc, Life.list, { task_id: taskId }, { timeoutMs: 15_000 });

export const script = (steps: unknown[], flags: { ignore_cancel?: boolean; ignore_sigterm?: boolean } = {}) => JSON.stringify({ script: steps, ...flags });

/** Gone = no such pid, or only a zombie waiting for whoever adopted it to reap it. */
export function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return true;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z');
  } catch {
    return true;
  }
}

export async function eventually<T>(fn: () => Promise<T> | T, check: (v: T) => boolean, timeoutMs = 10_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T;
  for (;;) {
    last = await fn();
    if (check(last)) return last;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms; last value: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** How many requests each lifecycle instance answered on an endpoint ($SRV.STATS). */
export async function requestsAnsweredBy(nc: NatsConnection, endpointName: string): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for await (const s of await new Svcm(nc).client().stats('lifecycle')) {
    const instance = s.metadata?.instance_id ?? s.id;
    for (const e of s.endpoints ?? []) if (e.name === endpointName) out[instance] = (out[instance] ?? 0) + e.num_requests;
  }
  return out;
}

export async function natsClient(url: string, name: string): Promise<NatsConnection> {
  return connectNats({ url, name });
}

/** The lifecycle service as its own OS process, so it can be killed hard. */
export async function spawnLifecycle(env: Record<string, string>, onLine?: (line: string) => void, as?: { uid: number; gid: number }): Promise<ChildProcess> {
  const child = spawn(process.execPath, [serviceEntry('lifecycle')], {
    env: { ...process.env, LOG_LEVEL: 'info', AGENT_UID_RANGE: workerAgentUidRange(), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    ...(as ?? {}),
  });
  const lines: string[] = [];
  await new Promise<void>((resolve, reject) => {
    // A hang guard, not a bound of the service: a niced test lane on a busy 2-core runner has taken
    // more than 20 s to bring up one Node process.
    const timer = setTimeout(() => reject(new Error(`lifecycle did not start:\n${lines.join('\n')}`)), 45_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`lifecycle exited with ${code}:\n${lines.join('\n')}`));
    });
    createInterface({ input: child.stdout! }).on('line', (line) => {
      lines.push(line);
      onLine?.(line);
      if (line.includes('"msg":"lifecycle started"')) {
        clearTimeout(timer);
        resolve();
      }
    });
    createInterface({ input: child.stderr! }).on('line', (line) => {
      lines.push(line);
      onLine?.(line);
    });
  });
  child.removeAllListeners('exit');
  return child;
}

export function killHard(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

/**
 * The registry entry of an execution, or null, read as the services read it (RegistryReader: a
 * stream-info listing, then a direct get). Never `kv.keys()`: its consumer waits 30 s for a heartbeat
 * when the entry ages out between the consumer's creation and its delivery (ADR 0009), which is
 * exactly when the tests that wait for an expiry poll.
 */
export const kvEntry = async (nc: NatsConnection, id: string): Promise<Execution | null> => (await RegistryReader.bind(nc, log)).get(id);

/** A registry entry of a READY execution of `taskId` (fake pids), as an owner instance would write it. */
export function executionEntry(taskId: string, instanceId = 'life-test'): Execution {
  const now = new Date().toISOString();
  return {
    execution_id: randomUUID(),
    session_id: randomUUID(),
    task_id: taskId,
    workspace_id: randomUUID(),
    instance_id: instanceId,
    protocol: 'acp',
    agent: 'mock',
    pid: 123,
    agentctl_pid: 122,
    agentctl_url: null,
    status: 'READY',
    turn_id: null,
    fence_epoch: 0,
    started_at: now,
    updated_at: now,
  };
}
