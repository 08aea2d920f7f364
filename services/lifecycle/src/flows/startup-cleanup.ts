import { childProcesses, isAlive, pidsByUid, terminate, type ProcessRef } from '@kandev/runtime/host';
import { buildEvent, type Logger } from '@kandev/runtime';
import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { relayAgentctlLog } from '../agentctl/log-relay.js';
import { leftoversToReport, stoppedEventId, type Leftover } from '../domain/teardown.js';
import type { EventJournal } from '../store/event-journal.js';
import type { ExecutionRegistry } from '../store/registry.js';
import type { StateFile } from '../store/state-file.js';

/** How long leftovers are SIGKILLed again before start-up goes on without them. */
const LEFTOVER_KILL_WINDOW_MS = 5_000;

/** The uids of a previous run, taken back for its sweep (AgentIsolation). */
export interface LeftoverUids {
  claimLeftoverUid(uid: number): boolean;
  releaseLeftoverUid(uid: number): void;
}

/**
 * what a previous run of this instance id left behind. Every process in the state file
 * that is still the very same process (pid + start time) is killed, and every process of an
 * execution's uid once this instance holds that uid again (another instance may have taken it
 * since: its processes are left alone); every registry entry this instance id still owns is
 * deleted; each execution is reported once as `execution.stopped` with how `lost`. Runs before
 * any endpoint is served.
 */
export async function cleanUpLeftovers(deps: {
  instanceId: string;
  stateFile: StateFile;
  registry: ExecutionRegistry;
  journal: EventJournal;
  uids: LeftoverUids;
  log: Logger;
}): Promise<number> {
  const { instanceId, stateFile, registry, journal, uids, log } = deps;
  const { entries, problem } = stateFile.readLeftovers();
  if (problem) log.error({ path: stateFile.path, problem }, 'cannot read the state file; leftover processes (if any) are not killed');

  const claimed = new Set<number>();
  for (const e of entries) {
    if (!e.uid || claimed.has(e.uid)) continue;
    if (uids.claimLeftoverUid(e.uid)) claimed.add(e.uid);
    else
      log.warn(
        { uid: e.uid, execution_id: e.execution_id },
        "another instance holds a previous run's uid now: only that run's own agentctl and agent are killed, not the uid's processes",
      );
  }
  const procs: ProcessRef[] = [];
  // Listed after the claims: from then on no other instance can start a process under those uids.
  const byUid = claimed.size > 0 ? pidsByUid() : new Map<number, number[]>();
  for (const e of entries) {
    const agentctl: ProcessRef = { pid: e.agentctl.pid, startTime: e.agentctl.start_time };
    // An agent whose pid we never learnt (crash mid-launch) is found as agentctl's child.
    const agents: ProcessRef[] = e.agent ? [{ pid: e.agent.pid, startTime: e.agent.start_time }] : isAlive(agentctl) ? childProcesses(agentctl.pid) : [];
    procs.push(...agents, agentctl);
    // With a uid of its own, every process of the execution is found by it, grandchildren included.
    if (e.uid && claimed.has(e.uid)) for (const pid of byUid.get(e.uid) ?? []) if (!procs.some((p) => p.pid === pid)) procs.push({ pid, startTime: null });
  }
  // Unsupervised and unreachable (their owner is gone): no grace, SIGKILL, each with its process group.
  const left = await terminate(procs, {
    graceMs: 0,
    killWindowMs: LEFTOVER_KILL_WINDOW_MS,
    onSignal: (_signal, pids, round) => {
      if (round === 1) log.warn({ pids }, 'killed processes left behind by a previous run');
      else log.error({ pids, attempt: round - 1 }, 'leftover process survives SIGKILL; retrying');
    },
  });
  if (left.survivors.length > 0) log.error({ pids: left.survivors.map((p) => p.pid) }, 'leftover processes survive SIGKILL; going on without them');
  for (const uid of claimed) uids.releaseLeftoverUid(uid);

  let owned: Awaited<ReturnType<ExecutionRegistry['all']>> = [];
  try {
    owned = (await registry.all()).filter((e) => e.instance_id === instanceId);
  } catch (e) {
    log.error({ err: e }, 'cannot list the registry; stale entries lapse with their TTL');
  }
  const fromState: Leftover[] = entries.map((e) => ({
    execution_id: e.execution_id,
    workspace_id: e.workspace_id,
    task_id: e.task_id,
    session_id: e.session_id,
    pid: e.agent?.pid ?? null,
  }));
  const lost = leftoversToReport(fromState, owned, instanceId);
  for (const l of lost) {
    const ev = buildEvent(
      'execution.stopped',
      { workspace_id: l.workspace_id, task_id: l.task_id, session_id: l.session_id },
      {
        execution_id: l.execution_id,
        how: 'lost',
        grace_ms: null,
        reason: 'lifecycle_instance_restarted',
        pid: l.pid,
        exit_code: null,
        signal: null,
        orphaned: false,
      },
      // The teardown's own report, if it got that far before the crash, has this id too: one stop.
      stoppedEventId(l.execution_id),
    );
    await journal.record(ev);
    await registry
      .delete(l.execution_id, l.task_id)
      .catch((e) => log.warn({ err: e, execution_id: l.execution_id }, 'registry delete failed; the entry lapses with its TTL'));
    log.warn({ execution_id: l.execution_id, task_id: l.task_id, session_id: l.session_id, pid: l.pid }, 'execution left behind by a previous run cleaned up');
  }
  relayAgentctlLogs(stateFile.agentctlLogDir, log);
  stateFile.flush();
  return lost.length;
}

/**
 * What each agentctl logged after the previous run died (its stop of the agent's tree: which
 * signals, what survived), written to a file since its stderr had no reader (agentctl
 * `--log-file`): relayed into this run's log, then removed.
 */
function relayAgentctlLogs(dir: string, log: Logger): void {
  let files: string[];
  try {
    files = readdirSync(dir).filter((f) => f.endsWith('.log'));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') log.warn({ err: e, dir }, 'cannot read the agentctl logs of the previous run');
    return;
  }
  for (const file of files) {
    const execution_id = file.slice(0, -'.log'.length);
    try {
      for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) if (line.trim()) relayAgentctlLog(log, line, { execution_id, previous_run: true });
    } catch (e) {
      log.warn({ err: e, execution_id }, 'cannot read the agentctl log of the previous run');
    }
  }
  rmSync(dir, { recursive: true, force: true });
}
