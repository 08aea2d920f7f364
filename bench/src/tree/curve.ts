import { readProcStat } from '@kandev/runtime/host';
import { Worker } from 'node:worker_threads';
import postgres from 'postgres';
import { procStat } from '@kandev/testkit';
import { agentProcess, preciseNow, type AgentProcess, type BenchStack } from '../e2e.js';
import { cpuSnapshot, cpuSpent, liveCpuMs, settled, type CpuSpent } from '../cpu.js';
import { summarize, type Stats } from '../stats.js';
import { seedTree } from './seed.js';

/*
 * The tree-hold curve (issue "Behaviour over hours"): a pause of a 1,000-task tree with N live
 * scripted sessions, for growing N. For each N: how fast the sessions were launched, the pause's
 * reply, when every member session read CANCELLED in the database, when every agent and every
 * agentctl process was gone (/proc, pid + start time), GET /sessions/:id latency sampled the whole
 * time from a worker thread (one read at a time, a new one at most every READ_PACE_MS), and the CPU
 * each kind of process spent from the request until the last agent was gone.
 */

/**
 * A new read at most this often: enough samples to see a stall, not so many that the reads are the load.
 * BENCH_READ_PACE_MS changes it (a console polling a session page reads about every second).
 */
const READ_PACE_MS = Number(process.env.BENCH_READ_PACE_MS ?? 20);
/** How long reads are sampled before the pause, on the settled stack (the quiet figure to compare with). */
const QUIET_SAMPLING_MS = 1_000;

export interface CurvePoint {
  live: number;
  /** Sessions launched per second through the API (LAUNCH_WORKERS at a time, until each agent runs). */
  launchPerSec: number;
  launchMs: number;
  /** Launches refused as busy (503) and tried again. */
  launchRefused: number;
  /** CLOCK_MONOTONIC ms of the request and of the last process gone: the window of a CPU profile. */
  window: [number, number];
  settledMs: number | null;
  replyMs: number;
  /** First time the database showed every member session CANCELLED (polled every few ms beside the request). */
  cancelledMs: number;
  /** Until every agent process was gone. */
  agentsGoneMs: number;
  /** Until every agentctl process was gone. */
  agentctlsGoneMs: number;
  /** GET /sessions/:id latency from the pause request until the last agentctl was gone. */
  reads: Stats;
  readFailures: number;
  /** The same reads on the settled stack before the pause. */
  quietReads: Stats;
  cpu: CpuSpent;
  /** CPU ms the agentctls and agents spent from the request until they were gone (reaped by the lifecycle). */
  reapedCpuMs: number;
}

export const LAUNCH_WORKERS = Number(process.env.BENCH_LAUNCH_WORKERS ?? 8);

export interface Live {
  session: string;
  agent: AgentProcess;
  agentctl: AgentProcess;
}

/** Start `count` long-running sessions on distinct tasks, LAUNCH_WORKERS at a time, and wait until each agent runs. */
export async function launchSessions(b: BenchStack, taskIds: string[], count: number): Promise<{ live: Live[]; ms: number; refused: number }> {
  const out: Live[] = [];
  let refused = 0;
  const queue = taskIds.slice(1, count + 1);
  const prompt = JSON.stringify({ script: [{ sleep_ms: 600_000 }] });
  const t = performance.now();
  const worker = async () => {
    for (let id = queue.shift(); id; id = queue.shift()) {
      // A busy lifecycle refuses a launch that cannot start within LAUNCH_QUEUE_WAIT_MS (503): a
      // client tries again, and so does this one (the refusals are counted).
      let s;
      for (;;) {
        const r = await b.api.call('POST', `/tasks/${id}/sessions`, { prompt });
        if (r.status === 503) {
          refused++;
          await new Promise((res) => setTimeout(res, 250));
          continue;
        }
        if (r.status >= 300) throw new Error(`POST /tasks/${id}/sessions → ${r.status} ${JSON.stringify(r.body)}`);
        s = r.body;
        break;
      }
      const detail = (await b.api.get(`/sessions/${s.id}`)).body;
      const agent = agentProcess(detail.execution.pid);
      if (!agent) throw new Error(`the agent of session ${s.id} (pid ${detail.execution.pid}) is not running`);
      const agentctl = agentProcess(procStat(agent.pid)!.ppid);
      if (!agentctl) throw new Error(`the agentctl of session ${s.id} is not running`);
      out.push({ session: s.id, agent, agentctl });
    }
  };
  await Promise.all(Array.from({ length: LAUNCH_WORKERS }, worker));
  return { live: out, ms: performance.now() - t, refused };
}

/**
 * Until every process is gone: monotonic ms of the last one. Only the last one matters, so each
 * pass stops at the first process still there (one /proc read per pass, mostly): a poll of all of
 * them every few ms would itself take a share of the cores the teardown needs.
 */
export async function allGone(procs: readonly AgentProcess[], timeoutMs: number): Promise<number> {
  const left = [...procs];
  const end = Date.now() + timeoutMs;
  for (;;) {
    while (left.length > 0) {
      const p = left[0]!;
      const st = procStat(p.pid);
      if (st && st.start === p.start && st.state !== 'Z') break;
      left.shift();
    }
    if (left.length === 0) return preciseNow();
    if (Date.now() > end)
      throw new Error(`${left.length} of ${procs.length} processes still running after ${timeoutMs} ms: ${left.map((p) => p.pid).join(', ')}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * CPU ms of the processes the lifecycle services have reaped (their children's utime + stime,
 * /proc/<pid>/stat fields 16 and 17): every agentctl that exited, with the agents it reaped. An
 * exited process's time is in no live process's own figure, only in its parent's.
 */
function reapedCpuMs(): number {
  let ms = 0;
  for (const [pid, p] of cpuSnapshot().processes) {
    if (p.kind !== 'lifecycle') continue;
    const st = readProcStat(Number(pid));
    if (st) ms += (st.cutime + st.cstime) * 10;
  }
  return ms;
}

function startReads(b: BenchStack, sessions: string[]): { stop(): Promise<{ samples: Array<[number, number]>; failures: number }> } {
  const worker = new Worker(new URL('./read-sampler.js', import.meta.url), {
    workerData: { url: b.stack.gatewayUrl, token: b.token, sessions, paceMs: READ_PACE_MS },
  });
  const done = new Promise<{ samples: Array<[number, number]>; failures: number }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return {
    async stop() {
      worker.postMessage('stop');
      const r = await done;
      await worker.terminate();
      return r;
    },
  };
}

/** One point of the curve: a fresh 1,000-task tree, `live` sessions on it, pause, measure, resume. */
export async function curvePoint(b: BenchStack, workspaceId: string, live: number, log: (m: string) => void): Promise<CurvePoint> {
  const sql = postgres(b.stack.db.url, { max: 1, onnotice: () => undefined });
  try {
    const { root, ids } = await seedTree(b, workspaceId, 1000);
    const launched = await launchSessions(b, ids, live);
    const sessions = launched.live.map((l) => l.session);
    const settledMs = await settled(['agent', 'agentctl'], { timeoutMs: 60_000 });
    const reads = startReads(b, sessions);
    await new Promise((r) => setTimeout(r, QUIET_SAMPLING_MS));

    const cpu0 = cpuSnapshot();
    // The reaped time is each exited process's whole life: what the agents and agentctls had used
    // before the request is taken off, so what is left is their teardown.
    const reaped0 = reapedCpuMs() + launched.live.reduce((sum, l) => sum + liveCpuMs(l.agent.pid) + liveCpuMs(l.agentctl.pid), 0);
    // The clock starts after those snapshots, right before the request: reading every process's
    // figures takes 45-55 ms for 100 pairs, which the times below used to include.
    const epoch0 = performance.timeOrigin + performance.now();
    const t0 = preciseNow();
    let cancelledAt: number | null = null;
    let replied = false;
    const watchCancelled = (async () => {
      while (cancelledAt === null) {
        const [c] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM orchestrator.sessions WHERE id = ANY(${sessions}) AND state = 'CANCELLED'`;
        if (c!.n === live) cancelledAt = preciseNow();
        else if (replied) break;
        else await new Promise((r) => setTimeout(r, 5));
      }
    })();
    await b.api.ok('POST', `/tasks/${root}/tree/pause`);
    const replyMs = preciseNow() - t0;
    replied = true;
    await watchCancelled;
    const [c] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM orchestrator.sessions WHERE id = ANY(${sessions}) AND state = 'CANCELLED'`;
    if (c!.n !== live) throw new Error(`pause: only ${c!.n} of ${live} sessions CANCELLED at the reply`);
    const [agentsEnd, agentctlsEnd] = await Promise.all([
      allGone(
        launched.live.map((l) => l.agent),
        120_000,
      ),
      allGone(
        launched.live.map((l) => l.agentctl),
        120_000,
      ),
    ]);
    const cpu = cpuSpent(cpu0, cpuSnapshot());
    // An agentctl counts as gone once it is a zombie; its time reaches the lifecycle's reaped-children
    // figure only once the lifecycle has reaped it.
    const reapedBy = Date.now() + 5_000;
    while (launched.live.some((l) => procStat(l.agentctl.pid)?.start === l.agentctl.start) && Date.now() < reapedBy)
      await new Promise((r) => setTimeout(r, 20));
    const reaped = reapedCpuMs() - reaped0;
    const epochEnd = performance.timeOrigin + performance.now();
    const { samples, failures } = await reads.stop();
    // A read counts for the teardown when any part of it falls inside it (one begun just before and stalled by it too).
    const during = samples.filter(([at, ms]) => at + ms >= epoch0 && at <= epochEnd).map(([, ms]) => ms);
    const quiet = samples.filter(([at, ms]) => at + ms < epoch0).map(([, ms]) => ms);
    const point: CurvePoint = {
      live,
      launchMs: launched.ms,
      launchRefused: launched.refused,
      window: [t0, Math.max(agentsEnd, agentctlsEnd)],
      launchPerSec: (live / launched.ms) * 1000,
      settledMs,
      replyMs,
      cancelledMs: (cancelledAt ?? preciseNow()) - t0,
      agentsGoneMs: agentsEnd - t0,
      agentctlsGoneMs: agentctlsEnd - t0,
      reads: summarize(during),
      readFailures: failures,
      quietReads: summarize(quiet),
      cpu,
      reapedCpuMs: reaped,
    };
    log(describe(point));
    await b.api.ok('POST', `/tasks/${root}/tree/resume`);
    return point;
  } finally {
    await sql.end();
  }
}

export function describe(p: CurvePoint): string {
  const kinds = Object.entries(p.cpu.byKind)
    .filter(([, ms]) => ms >= 10)
    .sort((a, b) => b[1] - a[1])
    .map(([k, ms]) => `${k} ${Math.round(ms)}`)
    .join(', ');
  return (
    `${p.live} live: launched at ${p.launchPerSec.toFixed(1)}/s (${p.launchRefused} refused as busy); pause reply ${p.replyMs.toFixed(0)} ms (all CANCELLED at ${p.cancelledMs.toFixed(0)}), ` +
    `agents gone ${p.agentsGoneMs.toFixed(0)} ms, agentctls gone ${p.agentctlsGoneMs.toFixed(0)} ms; GET /sessions/:id during it ` +
    `p50 ${p.reads.p50.toFixed(1)} / p99 ${p.reads.p99.toFixed(1)} / max ${p.reads.max.toFixed(1)} ms (n ${p.reads.n}, ${p.readFailures} failed; quiet p50 ${p.quietReads.p50.toFixed(1)}); ` +
    `CPU ms ${Math.round(p.cpu.machineMs)} machine (${Math.round(p.cpu.busyShare * 100)}% of the cores; exited agentctls+agents ${Math.round(p.reapedCpuMs)}; live processes: ${kinds}); monotonic window ${p.window[0].toFixed(0)}..${p.window[1].toFixed(0)}`
  );
}
