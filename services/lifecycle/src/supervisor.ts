import { settledOrAfter } from '@kandev/runtime/host';
import {
  conflict,
  isKandevError,
  notFound,
  overloaded,
  unavailable,
  type DrainReport,
  type Execution,
  type LaunchRequest,
  type Life,
  type LifePermission,
  type RequestOf,
  type ResultOf,
} from '@kandev/contracts';
import { noteActivity, readOnScrape, type HandlerContext } from '@kandev/runtime';
import { admitUnderCap, drainOutcome, heldExecutions } from './domain/drain.js';
import { refreshSliceOf, refreshSlices, registryRefreshMs } from './domain/liveness.js';
import { shutdownGrace, teardownGrace, type TeardownRequest } from './domain/teardown.js';
import type { Executions, LifecycleDeps } from './flows/context.js';
import { launch } from './flows/launch.js';
import { answerPermission } from './flows/permissions.js';
import { TeardownExecutor } from './flows/teardown.js';
import { cancelTurn, sendPrompt } from './flows/turns.js';
import { LaunchGate } from './launch-gate.js';
import type { LiveExecution } from './live-execution.js';

/**
 * The executions this instance owns, and the entry to every flow on them: launch (flows/launch.ts,
 * with the B-1 fence), prompt and cancel (flows/turns.ts, B-2 fenced, R-3), stop (R-2/R-6.3,
 * flows/teardown.ts), registry refresh and shutdown. Endpoint handlers are thin wrappers over
 * these methods.
 */
export class ExecutionSupervisor {
  private readonly live = new Map<string, LiveExecution>();
  private readonly teardowns: TeardownExecutor;
  private readonly gate: LaunchGate;
  private readonly ctx: Executions;
  private refreshTimer: NodeJS.Timeout | undefined;
  private shuttingDown = false;
  /** Launch requests being handled (queued, spawning, handshaking): they count against MAX_EXECUTIONS and a drain waits for them. */
  private readonly launching = new Set<string>();
  /** Woken whenever an execution is gone or a launch has ended (a drain waits on them). */
  private readonly watchers = new Set<() => void>();
  /** Ends this instance's launch subscriptions (service.ts); the other instances then take every launch. */
  private stopLaunchIntake: (() => Promise<void>) | undefined;
  private draining: Promise<DrainReport> | undefined;

  constructor(private readonly deps: LifecycleDeps) {
    this.gate = new LaunchGate({ concurrency: deps.env.LAUNCH_CONCURRENCY, maxWaitMs: deps.env.LAUNCH_QUEUE_WAIT_MS }, deps.env.LAUNCH_RESERVATION_TTL_MS);
    this.teardowns = new TeardownExecutor({
      journal: deps.journal,
      stateFile: deps.stateFile,
      log: deps.log,
      isolation: deps.isolation,
      forget: (id) => {
        this.live.delete(id);
        this.changed();
      },
      abandoning: () => this.shuttingDown,
      stoppingCpu: deps.stoppingCpu,
    });
    this.ctx = { deps, live: this.live, teardowns: this.teardowns, shuttingDown: () => this.shuttingDown };
    readOnScrape('kandev_live_executions', () => this.live.size);
    readOnScrape('kandev_launch_queue_depth', () => this.gate.state.waiting);
  }

  /** True from the first drain request on: no launch is taken, /readyz says not ready. */
  get isDraining(): boolean {
    return this.draining !== undefined;
  }

  /** Executions this instance holds now (live, or being launched). */
  get heldCount(): number {
    return this.held().size;
  }

  /** service.ts hands over how to end the launch subscriptions once they are served. */
  setLaunchIntake(stop: () => Promise<void>): void {
    this.stopLaunchIntake = stop;
  }

  private held(): Set<string> {
    return heldExecutions(this.live.keys(), this.launching);
  }

  private changed(): void {
    for (const wake of [...this.watchers]) wake();
  }

  /** Refusals before anything is queued: draining, or at MAX_EXECUTIONS (counting places reserved for launches on their way). */
  private refuseNewExecution(extra: number): void {
    if (this.draining) throw unavailable('lifecycle instance is draining; another instance takes launches', { instance_id: this.deps.instanceId });
    const d = admitUnderCap(this.held().size + extra, this.deps.env.MAX_EXECUTIONS);
    if (d.kind === 'refuse') {
      throw overloaded(`lifecycle instance is at its cap of ${this.deps.env.MAX_EXECUTIONS} executions`, d.retryAfterMs / 1000, {
        instance_id: this.deps.instanceId,
        max_executions: this.deps.env.MAX_EXECUTIONS,
      });
    }
  }

  /** The registry record of an execution this instance owns and still has registered, else null. */
  registeredRecord(executionId: string): Execution | null {
    const x = this.live.get(executionId);
    return x && x.isRegistered ? x.record : null;
  }

  registeredRecordsOfTask(taskId: string): Execution[] {
    return [...this.live.values()].filter((x) => x.isRegistered && x.record.task_id === taskId).map((x) => x.record);
  }

  /** ADR 0026: admission before the caller's writes; throws the refusal, else holds a place for the launch. */
  reserveLaunch(executionId: string): { reserved: true; instance_id: string } {
    if (this.ctx.shuttingDown()) throw unavailable('lifecycle instance is shutting down');
    this.refuseNewExecution(this.gate.state.reserved);
    this.gate.reserve(executionId);
    return { reserved: true, instance_id: this.ctx.deps.instanceId };
  }

  async launch(req: LaunchRequest): Promise<Execution> {
    // A retry of a launch this instance runs or is running is answered by the flow, never refused here.
    // Places reserved for other launches count (its own, if it has one, is the place it takes).
    if (!this.live.has(req.execution_id) && !this.launching.has(req.execution_id))
      this.refuseNewExecution(this.gate.state.reserved - (this.gate.isReserved(req.execution_id) ? 1 : 0));
    this.launching.add(req.execution_id);
    try {
      return await launch(this.ctx, this.gate, req);
    } finally {
      this.launching.delete(req.execution_id);
      this.changed();
    }
  }

  /**
   * Drain (docs/operations.md, "Rolling out lifecycle"): no more launches here, then wait up to
   * `wait_ms` for the executions to end, then stop the rest (`stop`) or leave them (`wait`). A
   * second request joins the first and gets its report.
   */
  drain(req: RequestOf<typeof Life.drain>): Promise<DrainReport> {
    return (this.draining ??= this.runDrain(req));
  }

  private async runDrain(req: RequestOf<typeof Life.drain>): Promise<DrainReport> {
    const started = performance.now();
    const { env, instanceId, log } = this.deps;
    const mode = req.mode ?? 'stop';
    const waitMs = req.wait_ms ?? env.DRAIN_WAIT_MS;
    const graceMs = teardownGrace(req.grace_ms, env.TEARDOWN_GRACE_MS);
    log.info({ mode, wait_ms: waitMs, executions: this.held().size }, 'draining: this instance takes no more launches');
    // Launches still on their way here are refused by launch() (UNAVAILABLE); new ones go to the others.
    await this.stopLaunchIntake?.().catch((e: unknown) =>
      log.warn({ err: e }, 'ending the launch subscriptions failed; launches that still arrive are refused'),
    );
    const seen = new Set<string>();
    await this.untilNoneHeld(waitMs, seen);
    const waitedMs = Math.round(performance.now() - started);
    const outcome = drainOutcome(seen, this.held(), mode);
    if (outcome.toStop.length) {
      log.info({ executions: outcome.toStop.length, grace_ms: graceMs }, 'drain: stopping the executions still running');
      // A launch still in progress (not live yet) is not stopped here: it is reported `left`, and the shutdown that follows tears it down.
      const live = outcome.toStop.map((id) => this.live.get(id)).filter((x) => x !== undefined);
      await Promise.all(live.map((x) => this.teardowns.teardown(x, { reason: 'lifecycle_drain', graceMs, orphaned: false })));
    }
    const still = this.held();
    const report: DrainReport = {
      instance_id: instanceId,
      mode,
      finished: outcome.finished,
      stopped: outcome.toStop.filter((id) => !still.has(id)),
      left: [...outcome.left, ...outcome.toStop.filter((id) => still.has(id))],
      waited_ms: waitedMs,
      took_ms: Math.round(performance.now() - started),
    };
    log.info({ finished: report.finished.length, stopped: report.stopped.length, left: report.left.length, took_ms: report.took_ms }, 'drained');
    return report;
  }

  /** Resolves once this instance holds no execution, or after `ms`; records in `seen` every execution held meanwhile. */
  private async untilNoneHeld(ms: number, seen: Set<string>): Promise<void> {
    const deadline = performance.now() + ms;
    for (;;) {
      const held = this.held();
      for (const id of held) seen.add(id);
      const left = deadline - performance.now();
      if (held.size === 0 || left <= 0) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.watchers.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, left);
        this.watchers.add(wake);
      });
    }
  }

  async prompt(req: RequestOf<typeof Life.prompt>): Promise<ResultOf<typeof Life.prompt>> {
    await sendPrompt(this.owned(req.execution_id), req.turn_id, req.prompt, req.context);
    return { turn_id: req.turn_id };
  }

  async cancel(req: RequestOf<typeof Life.cancel>): Promise<ResultOf<typeof Life.cancel>> {
    return cancelTurn(this.ctx, this.owned(req.execution_id), req);
  }

  /** the operator's answer to a permission request, to this execution's agentctl. */
  async respondPermission(req: RequestOf<typeof LifePermission.respond>): Promise<ResultOf<typeof LifePermission.respond>> {
    return answerPermission(this.owned(req.execution_id), req);
  }

  /** accepted at once; the teardown runs on once the acceptance is answered (single flight per execution). */
  async stop(req: RequestOf<typeof Life.stop>, ctx: Pick<HandlerContext, 'afterReply'>): Promise<ResultOf<typeof Life.stop>> {
    const x = this.live.get(req.execution_id);
    if (!x) {
      // Unreadable registry: treated as "not registered" (answered below as already stopped); the reconciler re-sends a stop that mattered.
      const entry = await this.deps.registry.get(req.execution_id).catch((e: unknown) => {
        this.deps.log.warn({ err: e, execution_id: req.execution_id }, 'registry unreachable while routing a stop');
        return null;
      });
      if (entry && entry.instance_id !== this.deps.instanceId) {
        throw conflict(`execution is owned by ${entry.instance_id}`, { execution_id: req.execution_id, instance_id: entry.instance_id });
      }
      // Already gone: not an error, and nothing else is touched.
      return { accepted: false, execution_id: req.execution_id, already_gone: true };
    }
    const tr: TeardownRequest = { reason: req.reason, graceMs: teardownGrace(req.grace_ms, this.deps.env.TEARDOWN_GRACE_MS), orphaned: req.orphaned ?? false };
    if (tr.orphaned) x.log.info({ reason: req.reason }, 'stopping an orphaned execution (its session is already terminal)');
    // Accepted first, torn down after the reply (the request's afterReply, in its trace): a tree hold
    // sends a hundred of these at once and answers when they are accepted, and the start of each
    // teardown (its registry put, its request to agentctl) ran before each reply, so the last
    // acceptance waited for ninety-nine teardowns. The teardown logs its own failures.
    ctx.afterReply(() => void this.teardowns.teardown(x, tr));
    return { accepted: true, execution_id: x.id, already_gone: false };
  }

  /** Several stops in one request (a tree hold's sessions on this instance): each as `stop`, answered in order. */
  async stopMany(req: RequestOf<typeof Life.stopMany>, ctx: Pick<HandlerContext, 'afterReply'>): Promise<ResultOf<typeof Life.stopMany>> {
    const results = await Promise.all(
      req.stops.map((stop) =>
        this.stop(stop, ctx).catch((e: unknown) => {
          if (!isKandevError(e)) throw e;
          return { execution_id: stop.execution_id, error: e.toBody() };
        }),
      ),
    );
    return { results };
  }

  startRefreshing(): void {
    const { tickMs, slices } = refreshSlices(registryRefreshMs(this.deps.env.REGISTRY_TTL_MS));
    let tick = 0;
    this.refreshTimer = setInterval(() => {
      // Each execution is renewed once per refresh period, in its own slice of it: all of them at
      // once was a burst of one KV put per execution (200 live: 200 puts and heartbeats in one turn
      // of the loop every 5 s), and the reads and stops that arrived meanwhile waited behind it.
      const slice = tick++ % slices;
      const at = performance.timeOrigin + performance.now();
      // The registry entry and agentctl's heartbeat are renewed together: an instance too frozen to
      // do one does neither, and its agents stop one TTL after their entries lapse (ownerSilenceBound).
      for (const x of this.live.values()) {
        if (refreshSliceOf(x.id, slices) !== slice) continue;
        x.refresh();
        x.agentctl.heartbeat();
      }
      noteActivity('registry.refresh', at);
    }, tickMs);
    this.refreshTimer.unref();
  }

  /**
   * Service shutdown. Choice: tear this instance's executions down rather than leave them
   * running. Nothing else would refresh their registry entries or relay their events, so a left
   * agent would be an unobserved process that a stop can no longer reach (the instance-routed
   * subjects die with us). Bounded so the runtime's SHUTDOWN_TIMEOUT_MS is never hit: grace is at
   * most a third of it, and whatever still lives when the budget runs out stays in the state file
   * for start-up cleanup.
   */
  async shutdown(): Promise<void> {
    this.shuttingDown = true;
    if (this.refreshTimer) clearInterval(this.refreshTimer);
    const { env } = this.deps;
    const graceMs = shutdownGrace(env.TEARDOWN_GRACE_MS, env.SHUTDOWN_TIMEOUT_MS);
    const all = [...this.live.values()].map((x) => this.teardowns.teardown(x, { reason: 'lifecycle_shutdown', graceMs, orphaned: false }));
    if (all.length) this.deps.log.info({ executions: all.length, grace_ms: graceMs }, 'tearing down executions before shutdown');
    // Teardowns log their own failures.
    await settledOrAfter(Math.floor(env.SHUTDOWN_TIMEOUT_MS * 0.7), [Promise.all(all)]);
  }

  private owned(executionId: string): LiveExecution {
    const x = this.live.get(executionId);
    if (!x) throw notFound('execution not found on this instance', { execution_id: executionId, instance_id: this.deps.instanceId });
    return x;
  }
}
