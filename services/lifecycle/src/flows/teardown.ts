import { childProcesses, isAlive, processTree, settledOrAfter, signalProcesses, terminate, type ProcessRef, type TerminateOptions } from '@kandev/runtime/host';
import { SpanKind, activity, buildEvent, inSpan, metrics, type Logger } from '@kandev/runtime';
import { AgentctlHttpError } from '../agentctl/client.js';
import type { ProcessExit } from '../agentctl/process.js';
import type { AgentIsolation } from '../isolation/agent-isolation.js';
import type { StoppingCpu } from '../isolation/stopping-cpu.js';
import {
  backstopDelayMs,
  stopHow,
  stopRequestTimeoutMs,
  stoppedEvent,
  stoppedEventId,
  type StopObservation,
  type TeardownRequest,
} from '../domain/teardown.js';
import type { LiveExecution } from '../live-execution.js';
import type { EventJournal } from '../store/event-journal.js';
import type { StateFile } from '../store/state-file.js';

/** How long agentctl gets to exit by itself once its agent is gone, before we kill it. */
const AGENTCTL_EXIT_WAIT_MS = 2_000;

export interface TeardownDeps {
  journal: EventJournal;
  stateFile: StateFile;
  log: Logger;
  isolation: AgentIsolation;
  /** Called once the execution is fully gone (registry key deleted). */
  forget(executionId: string): void;
  /** True while the service shuts down: reconcile loops stop retrying forever and leave the rest to the next start. */
  abandoning(): boolean;
  /** Where a stopping execution's processes go to rank below the control plane. */
  stoppingCpu: StoppingCpu;
}

/**
 * From the stop on, nobody waits on an execution's processes but for their exit: agentctl (until
 * now at the control plane's priority, to relay cancels) and the agent's tree go below the control
 * plane, all of them together (isolation/stopping-cpu.ts, ADR 0046), so that a hundred ending at
 * once (a tree pause) leave the cores to the reads and decisions operators wait for.
 */
function lowerStopping(x: LiveExecution, stoppingCpu: StoppingCpu): void {
  const agent = x.agentRef && isAlive(x.agentRef) ? processTree(x.agentRef.pid).map((p) => p.pid) : [];
  stoppingCpu.lower([x.agentctl.pid, ...agent]);
}

/**
 * The teardown executor (R-6.3, B-4). Single flight per execution: a stop, a cancel escalation,
 * the agent exiting and service shutdown all join the first teardown. The only place in the system
 * that signals agent processes.
 */
export class TeardownExecutor {
  constructor(private readonly deps: TeardownDeps) {}

  teardown(x: LiveExecution, req: TeardownRequest): Promise<void> {
    x.teardown ??= inSpan(
      'execution teardown',
      { kind: SpanKind.INTERNAL, attributes: { 'kandev.execution_id': x.id, 'kandev.reason': req.reason, 'kandev.grace_ms': req.graceMs } },
      () => this.run(x, req),
    ).catch((e) => x.log.error({ err: e }, 'teardown failed'));
    return x.teardown;
  }

  private async run(x: LiveExecution, req: TeardownRequest): Promise<void> {
    const log = x.log.child({ reason: req.reason, grace_ms: req.graceMs });
    const started = performance.now();
    log.info('tearing execution down');
    x.update({ status: 'STOPPING' });
    void x.persist();

    const obs: StopObservation = {
      exitedOnItsOwn: x.agentExit !== null || (x.agentRef !== null && !isAlive(x.agentRef)),
      killedByUs: false,
      agentctlDied: req.agentctlDied,
    };
    let exit: ProcessExit = x.agentExit ?? { code: null, signal: null };
    // One deadline for the whole grace (R-10.5, ADR 0061): whoever signals, the agent is SIGKILLed
    // by `deadline`, and the lifecycle's backstop makes sure of it should agentctl be late.
    const deadline = Date.now() + req.graceMs;
    const left = () => Math.max(0, deadline - Date.now());
    if (!obs.exitedOnItsOwn) {
      if (x.client && !x.agentctl.exitInfo) {
        activity('teardown.lower_cpu', () => lowerStopping(x, this.deps.stoppingCpu));
        const backstop = this.backstop(x, req.graceMs, log);
        try {
          const r = await x.client.stop(req.graceMs, stopRequestTimeoutMs(req.graceMs));
          obs.agentctlHow = r.how;
          exit = { code: r.exit_code, signal: r.signal };
        } catch (e) {
          log.warn({ err: e, status: e instanceof AgentctlHttpError ? e.status : null }, 'agentctl did not stop the agent; signalling it directly');
          obs.killedByUs = await this.killDirectly(x, left(), log);
        } finally {
          if (backstop.fired()) obs.killedByUs = true;
          backstop.clear();
        }
      } else {
        obs.killedByUs = await this.killDirectly(x, left(), log);
      }
    }
    const confirmed = await this.reconcile(x, log);
    // The agent_exited line may have arrived while we waited; it has the real exit status.
    if (x.agentExit && exit.code === null && exit.signal === null) exit = x.agentExit;

    const how = stopHow(obs);
    metrics.teardownDuration.observe({ how }, (performance.now() - started) / 1000);
    if (how === 'killed' && !obs.agentctlDied) metrics.teardownEscalations.inc();
    const data = stoppedEvent(x.record, how, { reason: req.reason, graceMs: how === 'exited' ? null : req.graceMs, orphaned: req.orphaned }, exit);
    if (!confirmed) {
      // Shutdown cut the reconcile short: the state file keeps the entry, so the next start kills what is left.
      log.error({ how }, 'execution processes still alive at shutdown; left to start-up cleanup');
      return;
    }
    // Every process left with the execution's uid (a grandchild that ignored SIGTERM and outlived
    // agentctl) goes too, and only then may the uid go to another execution (R-9.1, ADR 0017).
    if (x.placement) {
      const placement = x.placement;
      const { survivors } = await activity('teardown.uid_sweep', () => this.deps.isolation.finish(placement));
      if (survivors.length === 0 && x.placement.identity) log.debug({ uid: x.placement.identity.uid }, "execution's uid released");
    }
    // Journalled, then published until JetStream acknowledges it (ADR 0008).
    await activity('teardown.journal', () => this.deps.journal.record(buildEvent('execution.stopped', x.scope, data, stoppedEventId(data.execution_id)))).catch(
      (e) => log.error({ err: e }, 'execution.stopped could not be journalled; it is lost'),
    );
    await x.unregister();
    this.deps.stateFile.remove(x.id);
    this.deps.forget(x.id);
    log.info({ how, exit_code: exit.code, signal: exit.signal }, 'execution stopped');
  }

  /**
   * agentctl is gone or silent: SIGTERM the agent and agentctl, wait out the grace, SIGKILL
   * whatever is left (the one schedule of @kandev/runtime/host's terminate). Returns whether the agent needed SIGKILL.
   */
  private async killDirectly(x: LiveExecution, graceMs: number, log: Logger): Promise<boolean> {
    const agents = this.agentRefs(x);
    const r = await terminate([...agents, x.agentctl.ref], this.schedule(x, log, { graceMs }));
    return r.killed.some((k) => agents.some((a) => a.pid === k.pid));
  }

  /**
   * agentctl SIGKILLs its agent at the grace deadline, but agentctl runs below the control
   * plane once stopping (ADR 0027, 0046) and on a loaded node its timer can be late. Shortly after
   * the deadline the lifecycle sends SIGKILL itself to whatever of the agent is still there (its
   * process group, as every signal of @kandev/runtime/host's terminate); agentctl sees its agent exit and answers.
   */
  private backstop(x: LiveExecution, graceMs: number, log: Logger): { fired(): boolean; clear(): void } {
    let fired = false;
    const timer = setTimeout(() => {
      const agents = this.agentRefs(x).filter(isAlive);
      if (agents.length === 0) return;
      const reached = signalProcesses(agents, 'SIGKILL');
      if (reached.length === 0) return;
      fired = true;
      log.warn({ pids: reached.map((p) => p.pid), grace_ms: graceMs }, 'agent outlived its grace deadline with agentctl still stopping it; killed');
    }, backstopDelayMs(graceMs));
    timer.unref();
    return { fired: () => fired, clear: () => clearTimeout(timer) };
  }

  /** The agent as we know it, or (launch not finished) whatever agentctl has spawned. */
  private agentRefs(x: LiveExecution): ProcessRef[] {
    if (x.agentRef) return [x.agentRef];
    return isAlive(x.agentctl.ref) ? childProcesses(x.agentctl.pid) : [];
  }

  /**
   * B-4: make sure the agent and agentctl are both gone. The agent has had its grace (agentctl's
   * stop, or killDirectly), so a survivor is SIGKILLed at once; agentctl gets a moment to exit by
   * itself (it leaves once it has reported its agent's end), then SIGKILL. SIGKILL is re-sent with
   * backoff until they are gone, each retry logged. Returns false only when shutdown cuts the
   * retries short.
   */
  private async reconcile(x: LiveExecution, log: Logger): Promise<boolean> {
    const [agents, agentctl] = await Promise.all([
      // agentctl's exit is not the agents' own (terminate waits for a pending exit before it looks).
      terminate(this.agentRefs(x), { ...this.schedule(x, log, { graceMs: 0 }), exits: [] }),
      terminate([x.agentctl.ref], this.schedule(x, log, { signal: null, graceMs: AGENTCTL_EXIT_WAIT_MS })),
    ]);
    if (agents.survivors.length > 0 || agentctl.survivors.length > 0) return false;
    // agentctl is gone: let every line it wrote be handled first (its agent_exited line has the
    // agent's real exit status). Bounded, should something else hold its stdout open.
    await settledOrAfter(AGENTCTL_EXIT_WAIT_MS, [x.agentctl.closed]);
    await x.inOrder(async () => undefined);
    return true;
  }

  private schedule(x: LiveExecution, log: Logger, o: Pick<TerminateOptions, 'graceMs' | 'signal'>): TerminateOptions {
    return {
      ...o,
      exits: [x.agentctl.exited],
      giveUp: () => this.deps.abandoning(),
      onSignal: (signal, pids, round) => {
        if (round === 0) log.info({ pids, signal }, 'signalled execution processes');
        else if (round === 1) log.warn({ pids, signal }, 'execution processes outlived their grace period; killed');
        else log[round < 7 ? 'warn' : 'error']({ pids, attempt: round - 1 }, 'process still alive after SIGKILL; retried');
      },
    };
  }
}
