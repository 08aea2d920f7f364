import { SpanKind, buildEvent, inSpan, trace, type Logger } from '@kandev/runtime';
import { AgentctlHttpError } from './agentctl/client.js';
import type { ProcessExit } from './agentctl/process.js';
import { killRetryDelayMs, stopHow, stopRequestTimeoutMs, stoppedEvent, type StopObservation, type TeardownRequest } from './domain/teardown.js';
import type { LiveExecution } from './live-execution.js';
import { childProcesses, isAlive, signalProcess, sleep, type ProcessRef } from './processes.js';
import type { EventJournal } from './store/event-journal.js';
import type { StateFile } from './store/state-file.js';

const POLL_MS = 25;
/** How long agentctl gets to exit by itself once its agent is gone, before we kill it. */
const AGENTCTL_EXIT_WAIT_MS = 2_000;

export interface TeardownDeps {
  journal: EventJournal;
  stateFile: StateFile;
  log: Logger;
  /** Called once the execution is fully gone (registry key deleted). */
  forget(executionId: string): void;
  /** True while the service shuts down: reconcile loops stop retrying forever and leave the rest to the next start. */
  abandoning(): boolean;
}

/**
 * The teardown executor (R-6.3, B-4). Single flight per execution: a stop, a cancel escalation,
 * the agent exiting and service shutdown all join the first teardown. The only place in the system
 * that signals agent processes.
 */
export class TeardownExecutor {
  constructor(private readonly deps: TeardownDeps) {}

  teardown(x: LiveExecution, req: TeardownRequest): Promise<void> {
    x.teardown ??= inSpan('execution teardown', { kind: SpanKind.INTERNAL, attributes: { 'kandev.execution_id': x.id, 'kandev.reason': req.reason, 'kandev.grace_ms': req.graceMs } }, () =>
      this.run(x, req),
    ).catch((e) => x.log.error({ err: e }, 'teardown failed'));
    return x.teardown;
  }

  private async run(x: LiveExecution, req: TeardownRequest): Promise<void> {
    const log = x.log.child({ reason: req.reason, grace_ms: req.graceMs });
    log.info('tearing execution down');
    x.update({ status: 'STOPPING' });
    void x.persist();

    const obs: StopObservation = {
      exitedOnItsOwn: x.agentExit !== null || (x.agentRef !== null && !isAlive(x.agentRef)),
      killedByUs: false,
      agentctlDied: req.agentctlDied,
    };
    let exit: ProcessExit = x.agentExit ?? { code: null, signal: null };
    if (!obs.exitedOnItsOwn) {
      if (x.client && !x.agentctl.exitInfo) {
        try {
          const r = await x.client.stop(req.graceMs, stopRequestTimeoutMs(req.graceMs));
          obs.agentctlHow = r.how;
          exit = { code: r.exit_code, signal: r.signal };
        } catch (e) {
          log.warn({ err: e, status: e instanceof AgentctlHttpError ? e.status : null }, 'agentctl did not stop the agent; signalling it directly');
          obs.killedByUs = await this.killDirectly(x, req.graceMs, log);
        }
      } else {
        obs.killedByUs = await this.killDirectly(x, req.graceMs, log);
      }
    }
    const confirmed = await this.reconcile(x, log);
    // The agent_exited line may have arrived while we waited; it has the real exit status.
    if (x.agentExit && exit.code === null && exit.signal === null) exit = x.agentExit;

    const how = stopHow(obs);
    const data = stoppedEvent(x.record, how, { reason: req.reason, graceMs: how === 'exited' ? null : req.graceMs, orphaned: req.orphaned }, exit);
    if (!confirmed) {
      // Shutdown cut the reconcile short: the state file keeps the entry, so the next start kills what is left.
      log.error({ how }, 'execution processes still alive at shutdown; left to start-up cleanup');
      return;
    }
    // Journalled, then published until JetStream acknowledges it (ADR 0008).
    await this.deps.journal.record(buildEvent('execution.stopped', x.scope, data)).catch((e) => log.error({ err: e }, 'execution.stopped could not be journalled; it is lost'));
    await x.unregister();
    this.deps.stateFile.remove(x.id);
    this.deps.forget(x.id);
    log.info({ how, exit_code: exit.code, signal: exit.signal }, 'execution stopped');
  }

  /**
   * agentctl is gone or silent: SIGTERM the agent (and agentctl), wait out the grace, SIGKILL
   * whatever is left. Returns whether the agent needed SIGKILL.
   */
  private async killDirectly(x: LiveExecution, graceMs: number, log: Logger): Promise<boolean> {
    const agents = this.agentRefs(x);
    const span = trace.getActiveSpan();
    for (const a of agents) {
      span?.addEvent('signal', { signal: 'SIGTERM', 'process.pid': a.pid });
      if (signalProcess(a, 'SIGTERM', { group: true })) log.info({ pid: a.pid, signal: 'SIGTERM' }, 'signalled agent');
    }
    signalProcess(x.agentctl.ref, 'SIGTERM');
    const gone = await waitGone(agents, graceMs);
    if (gone) return false;
    for (const a of agents) {
      span?.addEvent('signal', { signal: 'SIGKILL', 'process.pid': a.pid });
      if (signalProcess(a, 'SIGKILL', { group: true })) log.warn({ pid: a.pid, signal: 'SIGKILL' }, 'agent outlived its grace period; killed');
    }
    signalProcess(x.agentctl.ref, 'SIGKILL');
    return true;
  }

  /** The agent as we know it, or (launch not finished) whatever agentctl has spawned. */
  private agentRefs(x: LiveExecution): ProcessRef[] {
    if (x.agentRef) return [x.agentRef];
    return isAlive(x.agentctl.ref) ? childProcesses(x.agentctl.pid) : [];
  }

  /**
   * B-4: poll until the agent and agentctl are both gone. agentctl gets a moment to exit by itself;
   * after that every survivor is SIGKILLed again with backoff, and each retry is logged. Returns
   * false only when shutdown interrupts the loop.
   */
  private async reconcile(x: LiveExecution, log: Logger): Promise<boolean> {
    const agents = this.agentRefs(x);
    // agentctl is our child: it is gone once Node has reaped it (its exit event), not merely a zombie.
    const agentctlGone = () => x.agentctl.exitInfo !== undefined;
    const politeUntil = Date.now() + AGENTCTL_EXIT_WAIT_MS;
    for (let attempt = 0; ; ) {
      const agentsAlive = agents.filter(isAlive);
      const alive = agentctlGone() ? agentsAlive : [...agentsAlive, x.agentctl.ref];
      if (alive.length === 0) return true;
      if (agentsAlive.length === 0 && Date.now() < politeUntil) {
        await sleep(POLL_MS);
        continue;
      }
      if (this.deps.abandoning() && attempt >= 3) return false;
      for (const p of agentsAlive) signalProcess(p, 'SIGKILL', { group: true });
      if (!agentctlGone()) x.agentctl.kill('SIGKILL');
      const level = attempt < 5 ? 'warn' : 'error';
      log[level]({ attempt, pids: alive.map((p) => p.pid) }, 'process still alive after teardown; SIGKILL retried');
      await sleep(killRetryDelayMs(attempt));
      attempt++;
    }
  }
}

/** Resolves true once every process is gone, false when the deadline passes first. */
export async function waitGone(procs: readonly ProcessRef[], timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (!procs.some(isAlive)) return true;
    if (Date.now() >= deadline) return false;
    await sleep(Math.min(POLL_MS, Math.max(1, deadline - Date.now())));
  }
}
