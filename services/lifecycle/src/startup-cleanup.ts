import { buildEvent, type Logger } from '@kandev/runtime';
import type { EventJournal } from './store/event-journal.js';
import { leftoversToReport, type Leftover } from './domain/teardown.js';
import { childProcesses, isAlive, signalProcess, type ProcessRef } from './processes.js';
import type { ExecutionRegistry } from './store/registry.js';
import type { StateFile } from './store/state-file.js';
import { waitGone } from './teardown.js';

/**
 * what a previous run of this instance id left behind. Every process in the state file
 * that is still the very same process (pid + start time) is killed; every registry entry this
 * instance id still owns is deleted; each execution is reported once as `execution.stopped`
 * with how `lost`. Runs before any endpoint is served.
 */
export async function cleanUpLeftovers(deps: { instanceId: string; stateFile: StateFile; registry: ExecutionRegistry; journal: EventJournal; log: Logger }): Promise<number> {
  const { instanceId, stateFile, registry, journal, log } = deps;
  const { entries, problem } = stateFile.readLeftovers();
  if (problem) log.error({ path: stateFile.path, problem }, 'cannot read the state file; leftover processes (if any) are not killed');

  const procs: ProcessRef[] = [];
  for (const e of entries) {
    const agentctl: ProcessRef = { pid: e.agentctl.pid, startTime: e.agentctl.start_time };
    // An agent whose pid we never learnt (crash mid-launch) is found as agentctl's child.
    const agents: ProcessRef[] = e.agent ? [{ pid: e.agent.pid, startTime: e.agent.start_time }] : isAlive(agentctl) ? childProcesses(agentctl.pid) : [];
    procs.push(...agents, agentctl);
  }
  const alive = procs.filter(isAlive);
  for (const p of alive) {
    // Unsupervised and unreachable (their owner is gone): no grace, SIGKILL.
    // Agents and agentctl each lead a process group of their own: each goes with its group.
    if (signalProcess(p, 'SIGKILL', { group: true })) log.warn({ pid: p.pid }, 'killed a process left behind by a previous run');
  }
  for (let attempt = 0; attempt < 5 && !(await waitGone(alive, 1_000)); attempt++) {
    for (const p of alive.filter(isAlive)) signalProcess(p, 'SIGKILL');
    log.error({ attempt, pids: alive.filter(isAlive).map((p) => p.pid) }, 'leftover process survives SIGKILL; retrying');
  }

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
      { execution_id: l.execution_id, how: 'lost', grace_ms: null, reason: 'lifecycle_instance_restarted', pid: l.pid, exit_code: null, signal: null, orphaned: false },
    );
    await journal.record(ev);
    await registry.delete(l.execution_id, l.task_id).catch((e) => log.warn({ err: e, execution_id: l.execution_id }, 'registry delete failed; the entry lapses with its TTL'));
    log.warn({ execution_id: l.execution_id, task_id: l.task_id, session_id: l.session_id, pid: l.pid }, 'execution left behind by a previous run cleaned up');
  }
  stateFile.flush();
  return lost.length;
}
