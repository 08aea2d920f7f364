import {
  Orch,
  conflict,
  notFound,
  unavailable,
  validationError,
  type EventDataOf,
  type EventEnvelope,
  type EventType,
  type Execution,
  type LaunchRequest,
  type RequestOf,
  type ResultOf,
  Life,
} from '@kandev/contracts';
import { buildEvent, request, signAgentToken, type Logger, type NatsConnection } from '@kandev/runtime';
import { CatalogueError, resolveAgent } from '@kandev/agentctl/catalogue';
import { randomUUID } from 'node:crypto';
import { AgentctlClient, AgentctlHttpError, AgentctlUnreachable } from './agentctl/client.js';
import { AgentctlProcess, type AgentctlLine } from './agentctl/process.js';
import { decideCancel } from './domain/cancel.js';
import { shutdownGrace, teardownGrace, type TeardownRequest } from './domain/teardown.js';
import { promptAccepted, promptRefusal, turnCompleted, turnStarted } from './domain/turns.js';
import { mcpPublicUrl, type LifecycleEnv } from './env.js';
import { LaunchGate } from './launch-gate.js';
import { LiveExecution } from './live-execution.js';
import { processRef, sleep } from './processes.js';
import type { EventJournal } from './store/event-journal.js';
import type { ExecutionRegistry } from './store/registry.js';
import type { StateFile } from './store/state-file.js';
import { TeardownExecutor } from './teardown.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export interface SupervisorDeps {
  env: LifecycleEnv;
  instanceId: string;
  nc: NatsConnection;
  log: Logger;
  journal: EventJournal;
  registry: ExecutionRegistry;
  stateFile: StateFile;
  agentctlBin: string;
}

/**
 * The executions this instance owns: launch (with the B-1 fence), prompt, cancel (B-2 fenced,
 * R-3), stop, the relay of agentctl's events, and registry refresh. Endpoint handlers
 * are thin wrappers over these methods.
 */
export class ExecutionSupervisor {
  private readonly live = new Map<string, LiveExecution>();
  private readonly teardowns: TeardownExecutor;
  private refreshTimer: NodeJS.Timeout | undefined;
  private shuttingDown = false;
  private readonly gate: LaunchGate;

  constructor(private readonly deps: SupervisorDeps) {
    this.gate = new LaunchGate({ concurrency: deps.env.LAUNCH_CONCURRENCY, maxWaitMs: deps.env.LAUNCH_QUEUE_WAIT_MS });
    this.teardowns = new TeardownExecutor({
      journal: deps.journal,
      stateFile: deps.stateFile,
      log: deps.log,
      forget: (id) => this.live.delete(id),
      abandoning: () => this.shuttingDown,
    });
  }

  get size(): number {
    return this.live.size;
  }

  /** The registry record of an execution this instance owns and still has registered, else null. */
  registeredRecord(executionId: string): Execution | null {
    const x = this.live.get(executionId);
    return x && x.isRegistered ? x.record : null;
  }

  registeredRecordsOfTask(taskId: string): Execution[] {
    return [...this.live.values()].filter((x) => x.isRegistered && x.record.task_id === taskId).map((x) => x.record);
  }

  // ------------------------------------------------------------------ launch

  async launch(req: LaunchRequest): Promise<Execution> {
    if (this.shuttingDown) throw unavailable('lifecycle instance is shutting down');
    const existing = this.live.get(req.execution_id);
    if (existing) {
      // A retried launch: answer with what is there rather than spawning a second agent.
      if (existing.teardown) throw conflict('execution is being stopped', { execution_id: req.execution_id });
      return existing.record;
    }
    // Overload: start now, wait a bounded time in this instance's queue, or be refused at once (503).
    const release = await this.gate.acquire();
    try {
      return await this.launchAdmitted(req, release);
    } finally {
      release();
    }
  }

  /** Holds a launch slot until the agent is ready (or failed); the fence and first prompt run after it is given back. */
  private async launchAdmitted(req: LaunchRequest, releaseSlot: () => void): Promise<Execution> {
    const { env, deps } = { env: this.deps.env, deps: this.deps };
    // Checked again after the wait in the queue: shutdown, or a retry of this launch, may have come first.
    if (this.shuttingDown) throw unavailable('lifecycle instance is shutting down');
    const existing = this.live.get(req.execution_id);
    if (existing) {
      if (existing.teardown) throw conflict('execution is being stopped', { execution_id: req.execution_id });
      return existing.record;
    }
    const elsewhere = await deps.registry.get(req.execution_id, req.task_id);
    if (elsewhere) throw conflict(`execution is already registered by ${elsewhere.instance_id}`, { execution_id: req.execution_id });
    let protocol: Execution['protocol'];
    try {
      protocol = resolveAgent(req.agent).protocol;
    } catch (e) {
      if (e instanceof CatalogueError) throw validationError(e.message, { agent: req.agent });
      throw e;
    }

    const log = deps.log.child({ task_id: req.task_id, session_id: req.session_id, execution_id: req.execution_id });
    const token = await signAgentToken(env.KANDEV_JWT_SECRET, { task_id: req.task_id, session_id: req.session_id, execution_id: req.execution_id, mode: req.mcp_mode ?? env.AGENT_MCP_MODE });
    const started = performance.now();
    const proc = AgentctlProcess.spawn({
      bin: deps.agentctlBin,
      agent: req.agent,
      executionId: req.execution_id,
      sessionId: req.session_id,
      taskId: req.task_id,
      mcpUrl: mcpPublicUrl(env),
      mcpToken: token,
      cancelTimeoutMs: env.CANCEL_TIMEOUT_MS,
      handshakeTimeoutMs: env.LAUNCH_TIMEOUT_MS,
      exitWithParent: env.AGENTS_EXIT_WITH_LIFECYCLE,
      log,
    });
    const now = new Date().toISOString();
    const x = new LiveExecution(
      {
        execution_id: req.execution_id,
        session_id: req.session_id,
        task_id: req.task_id,
        workspace_id: req.workspace_id,
        instance_id: deps.instanceId,
        protocol,
        agent: req.agent,
        pid: null,
        agentctl_pid: proc.pid,
        agentctl_url: null,
        status: 'STARTING',
        turn_id: null,
        fence_epoch: req.fence_epoch,
        started_at: now,
        updated_at: now,
      },
      proc,
      log,
      deps.registry,
      env.REGISTRY_TTL_MS,
    );
    x.onLapse = (gapMs) => void this.readmit(x, gapMs);
    this.live.set(x.id, x);
    this.recordProcesses(x);
    void x.persist();
    // agentctl ending without a stop: behind every line it wrote (an agent_exited line says more).
    // During launch the failed `ready` covers it.
    void proc.closed.then((exit) =>
      x.inOrder(async () => {
        if (x.teardown || x.record.status === 'STARTING') return;
        log.warn({ exit_code: exit.code, signal: exit.signal }, 'agentctl exited on its own');
        void this.teardowns.teardown(x, { reason: 'agentctl_exited', graceMs: env.TEARDOWN_GRACE_MS, orphaned: false, agentctlDied: exit });
      }),
    );
    log.info({ agent: req.agent, agentctl_pid: proc.pid, fence_epoch: req.fence_epoch }, 'launching execution');

    let ready;
    try {
      ready = await proc.ready;
      releaseSlot();
    } catch (e) {
      releaseSlot();
      const stoppedMeanwhile = x.teardown !== null;
      await this.teardowns.teardown(x, { reason: 'launch_failed', graceMs: 0, orphaned: false });
      if (stoppedMeanwhile) throw conflict('execution was stopped while launching', { execution_id: x.id });
      throw unavailable(`agent failed to start: ${(e as Error).message}`, e);
    }
    if (x.teardown) {
      await x.teardown;
      throw conflict('execution was stopped while launching', { execution_id: x.id });
    }
    x.client = new AgentctlClient(ready.url);
    x.agentRef = processRef(ready.agent_pid);
    x.update({ status: 'READY', pid: ready.agent_pid, agentctl_url: ready.url, protocol: ready.protocol });
    this.recordProcesses(x);
    proc.listen((ev) => void x.inOrder(() => this.relay(x, ev)));
    await x.persist();
    log.info({ pid: ready.agent_pid, url: ready.url, ready_ms: Math.round(performance.now() - started) }, 'agent ready');
    await this.emit(x, 'execution.registered', { execution: x.record });

    // B-1: the orchestrator decides, under the task's row lock, whether this launch may live. A
    // refusal or silence tears it down before anything reaches the agent.
    let admission: { admitted: boolean; reason: string | null };
    try {
      admission = await request(deps.nc, Orch.executionAdmit, { execution_id: x.id, task_id: req.task_id, session_id: req.session_id, fence_epoch: req.fence_epoch, instance_id: deps.instanceId }, { timeoutMs: env.REQUEST_TIMEOUT_MS });
    } catch (e) {
      admission = { admitted: false, reason: `orchestrator unreachable (${(e as Error).message})` };
    }
    if (!admission.admitted) {
      const reason = `launch fenced: ${admission.reason ?? 'not admitted'}`;
      log.warn({ reason }, 'launch refused by the fence; tearing down');
      await this.teardowns.teardown(x, { reason, graceMs: env.TEARDOWN_GRACE_MS, orphaned: false });
      throw conflict(reason, { execution_id: x.id });
    }
    if (x.teardown) {
      await x.teardown;
      throw conflict('execution was stopped while launching', { execution_id: x.id });
    }
    if (req.prompt) {
      try {
        await this.sendPrompt(x, req.turn_id ?? randomUUID(), req.prompt, req.context);
      } catch (e) {
        log.error({ err: e }, 'first prompt failed; tearing down');
        await this.teardowns.teardown(x, { reason: 'first_prompt_failed', graceMs: env.TEARDOWN_GRACE_MS, orphaned: false });
        throw e;
      }
    }
    await this.emit(x, 'execution.ready', { execution: x.record });
    log.info({ launch_ms: Math.round(performance.now() - started) }, 'execution launched');
    return x.record;
  }

  private recordProcesses(x: LiveExecution): void {
    try {
      this.deps.stateFile.set({
        execution_id: x.id,
        workspace_id: x.record.workspace_id,
        task_id: x.record.task_id,
        session_id: x.record.session_id,
        agentctl: { pid: x.agentctl.ref.pid, start_time: x.agentctl.ref.startTime },
        agent: x.agentRef ? { pid: x.agentRef.pid, start_time: x.agentRef.startTime } : null,
      });
    } catch (e) {
      x.log.error({ err: e }, 'state file write failed; a crash now would leave this execution to TTL expiry only');
    }
  }

  // ------------------------------------------------------------------ prompt

  async prompt(req: RequestOf<typeof Life.prompt>): Promise<ResultOf<typeof Life.prompt>> {
    const x = this.owned(req.execution_id);
    await this.sendPrompt(x, req.turn_id, req.prompt, req.context);
    return { turn_id: req.turn_id };
  }

  private async sendPrompt(x: LiveExecution, turnId: string, prompt: string, context?: string): Promise<void> {
    const refusal = promptRefusal(x.turnView);
    if (refusal) throw conflict(refusal.message, { execution_id: x.id, turn_id: x.record.turn_id });
    if (x.finishedTurns.includes(turnId)) throw conflict('turn id was already used', { turn_id: turnId });
    // Reserve the turn before the call: a second prompt meanwhile sees it in flight, and the
    // turn's own lines (which may beat the HTTP reply) find it current.
    x.applyTurn(promptAccepted(x.turnView, turnId));
    void x.persist();
    try {
      await x.client!.prompt(prompt, turnId, context);
    } catch (e) {
      if (x.record.turn_id === turnId) {
        x.update({ status: x.record.status === 'STOPPING' ? 'STOPPING' : 'READY', turn_id: null });
        void x.persist();
      }
      if (e instanceof AgentctlHttpError && e.status === 409) throw conflict('agent has a turn in flight', { execution_id: x.id });
      if (e instanceof AgentctlUnreachable || (e instanceof AgentctlHttpError && e.status === 503)) throw unavailable('agent not running', e);
      throw unavailable(`agentctl refused the prompt: ${(e as Error).message}`, e);
    }
    x.log.info({ turn_id: turnId }, 'prompt sent');
  }

  // ------------------------------------------------------------------ cancel (R-3, B-2)

  async cancel(req: RequestOf<typeof Life.cancel>): Promise<ResultOf<typeof Life.cancel>> {
    const x = this.owned(req.execution_id);
    const decision = decideCancel(x.record, req.turn_id);
    switch (decision.kind) {
      case 'not_running':
        throw conflict('agent not running', { execution_id: x.id, status: x.record.status });
      case 'turn_mismatch':
        x.log.warn({ requested_turn_id: decision.requested, turn_id: decision.current }, 'cancel names another turn; nothing cancelled');
        throw conflict('cancel names a turn that is not the current one', { execution_id: x.id, turn_id: decision.current, requested_turn_id: decision.requested });
      case 'no_active_turn':
        return { cancelled: false, turn_id: null, stop_reason: null, reason: 'no_active_turn' };
      case 'cancel':
        break;
    }
    const { env } = this.deps;
    const started = performance.now();
    let answer;
    try {
      answer = await x.client!.cancel(decision.turnId, env.CANCEL_TIMEOUT_MS + 2_000);
    } catch (e) {
      if (e instanceof AgentctlHttpError && e.status === 409) {
        throw conflict('cancel names a turn that is not the current one', { execution_id: x.id, requested_turn_id: decision.turnId });
      }
      // No acknowledgement (504, or silence): report it, and escalate so the session is never wedged.
      const silent = e instanceof AgentctlUnreachable || (e instanceof AgentctlHttpError && (e.status === 504 || e.code === 'UNAVAILABLE'));
      const escalate = req.escalate !== false;
      x.log.warn({ err: e, turn_id: decision.turnId, escalate }, escalate ? 'agent did not acknowledge cancel; tearing down' : 'agent did not acknowledge cancel');
      if (escalate) void this.teardowns.teardown(x, { reason: 'cancel_unacknowledged', graceMs: env.TEARDOWN_GRACE_MS, orphaned: false });
      if (silent) throw unavailable(`agent did not acknowledge cancel within ${env.CANCEL_TIMEOUT_MS} ms`, e);
      throw unavailable(`cancel failed: ${(e as Error).message}`, e);
    }
    if (!answer.cancelled) return { cancelled: false, turn_id: null, stop_reason: null, reason: answer.reason };
    // The reply and agentctl's turn_completed line race; whichever comes first completes the turn.
    // The reply waits for the turn's state (READY), not for the events' acks: they are already written
    // to this NATS connection, ahead of the reply, and a failed publish is only logged either way.
    await x.inOrder(async () => void this.finishTurn(x, answer.turn_id, answer.stop_reason));
    x.log.info({ turn_id: answer.turn_id, stop_reason: answer.stop_reason, cancel_ms: Math.round(performance.now() - started) }, 'turn cancelled');
    return { cancelled: true, turn_id: answer.turn_id, stop_reason: answer.stop_reason, reason: null };
  }

  // ------------------------------------------------------------------ stop

  async stop(req: RequestOf<typeof Life.stop>): Promise<ResultOf<typeof Life.stop>> {
    const x = this.live.get(req.execution_id);
    if (!x) {
      const entry = await this.deps.registry.get(req.execution_id).catch(() => null);
      if (entry && entry.instance_id !== this.deps.instanceId) {
        throw conflict(`execution is owned by ${entry.instance_id}`, { execution_id: req.execution_id, instance_id: entry.instance_id });
      }
      // Already gone: not an error, and nothing else is touched.
      return { accepted: false, execution_id: req.execution_id, already_gone: true };
    }
    const tr: TeardownRequest = { reason: req.reason, graceMs: teardownGrace(req.grace_ms, this.deps.env.TEARDOWN_GRACE_MS), orphaned: req.orphaned ?? false };
    if (tr.orphaned) x.log.info({ reason: req.reason }, 'stopping an orphaned execution (its session is already terminal)');
    void this.teardowns.teardown(x, tr);
    return { accepted: true, execution_id: x.id, already_gone: false };
  }

  // ------------------------------------------------------------------ event relay

  private async relay(x: LiveExecution, ev: AgentctlLine): Promise<void> {
    switch (ev.type) {
      case 'turn_started': {
        const step = turnStarted(x.turnView, ev.turn_id);
        if (x.applyTurn(step)) void x.persist();
        if (step.publish && UUID.test(ev.turn_id)) await this.emit(x, 'turn.started', { execution_id: x.id, turn_id: ev.turn_id });
        return;
      }
      case 'turn_completed':
        if (ev.stop_reason === 'error') x.log.warn({ turn_id: ev.turn_id, error: ev.error }, 'turn failed');
        return this.finishTurn(x, ev.turn_id, ev.stop_reason);
      case 'agent_message':
        return void (await this.emit(x, 'agent.message', { execution_id: x.id, turn_id: UUID.test(ev.turn_id) ? ev.turn_id : null, text: ev.text }));
      case 'usage':
        return void (await this.emit(x, 'usage.recorded', {
          execution_id: x.id,
          usage_event_id: ev.usage_event_id,
          model: ev.model ?? null,
          cost_cents: ev.cost_cents,
          tokens_in: ev.tokens_in,
          tokens_cached_in: ev.tokens_cached_in,
          tokens_out: ev.tokens_out,
          ...(ev.priced === undefined ? {} : { priced: ev.priced }),
        }));
      case 'permission_requested':
      case 'permission_resolved':
        x.log.info({ permission_id: ev.permission_id, turn_id: ev.turn_id, event: ev.type, ...(ev.type === 'permission_resolved' ? { outcome: ev.outcome } : { title: ev.title }) }, 'agent permission');
        return;
      case 'agent_exited':
        x.agentExit = { code: ev.code, signal: ev.signal };
        if (!x.teardown) {
          x.log.warn({ exit_code: ev.code, signal: ev.signal }, 'agent exited on its own');
          void this.teardowns.teardown(x, { reason: 'agent_exited', graceMs: 0, orphaned: false });
        }
        return;
    }
  }

  private async finishTurn(x: LiveExecution, turnId: string, stopReason: string): Promise<void> {
    const step = turnCompleted(x.turnView, turnId);
    if (x.applyTurn(step)) void x.persist();
    if (!step.publish || !UUID.test(turnId)) return;
    // Published together (one connection keeps their order in the stream); the cancel reply waits for both acks.
    // the orchestrator moves the session to WAITING_FOR_INPUT on turn.completed, and the gateway pushes it.
    await Promise.all([
      this.emit(x, 'turn.completed', { execution_id: x.id, turn_id: turnId, stop_reason: stopReason }),
      stopReason === 'cancelled' ? this.emit(x, 'session.agent.cancelled', { execution_id: x.id, turn_id: turnId, stop_reason: stopReason }) : null,
    ]);
  }

  /** Recorded in the journal and published until acknowledged (ADR 0008); resolves once out, or once a first attempt failed. */
  private async emit<T extends EventType>(x: LiveExecution, type: T, data: EventDataOf<T>): Promise<void> {
    try {
      await this.deps.journal.record(buildEvent(type, x.scope, data) as EventEnvelope);
    } catch (e) {
      // The journal could not be written (disk full, state dir gone): the event is lost; say so loudly.
      x.log.error({ err: e, type }, 'event could not be journalled; it is lost');
    }
  }

  // ------------------------------------------------------------------ registry lapse (issue 11)

  /**
   * The entry was just re-put after a gap longer than the TTL, so it may have lapsed meanwhile
   * (this process stalled, or NATS was unreachable) and the orchestrator's reconciler may have
   * declared the execution lost (session FAILED) or a stop may have bumped the task's fence. Ask
   * the fence again: the same B-1 admission a launch gets. Admitted = the re-put entry stands;
   * refused = nobody wants this agent any more, so it is stopped. Orchestrator unreachable = the
   * entry stays (a stop can find it) and we keep asking, with backoff.
   */
  private async readmit(x: LiveExecution, gapMs: number): Promise<void> {
    const { deps, env } = { deps: this.deps, env: this.deps.env };
    if (x.teardown || x.record.status === 'STARTING') return;
    x.log.warn({ gap_ms: gapMs, registry_ttl_ms: env.REGISTRY_TTL_MS }, 'registry entry may have lapsed (refresh gap above the TTL); re-registered, asking the launch fence again');
    for (let attempt = 0; !x.teardown && !this.shuttingDown; attempt++) {
      let verdict: { admitted: boolean; reason: string | null };
      try {
        verdict = await request(
          deps.nc,
          Orch.executionAdmit,
          { execution_id: x.id, task_id: x.record.task_id, session_id: x.record.session_id, fence_epoch: x.record.fence_epoch, instance_id: deps.instanceId },
          { timeoutMs: env.REQUEST_TIMEOUT_MS },
        );
      } catch (e) {
        x.log.warn({ err: e, attempt }, 'orchestrator unreachable for re-admission; the execution stays registered, retrying');
        await sleep(Math.min(5_000, 250 * 2 ** attempt));
        continue;
      }
      if (verdict.admitted) {
        x.log.info('execution re-admitted after a registry lapse');
        return;
      }
      x.log.warn({ reason: verdict.reason }, 'execution was given up while its entry lapsed; stopping it');
      await this.teardowns.teardown(x, { reason: `registry_lapsed: ${verdict.reason ?? 'not admitted'}`, graceMs: env.TEARDOWN_GRACE_MS, orphaned: true });
      return;
    }
  }

  // ------------------------------------------------------------------ registry refresh and shutdown

  startRefreshing(): void {
    const every = Math.max(100, Math.floor(this.deps.env.REGISTRY_TTL_MS / 3));
    this.refreshTimer = setInterval(() => {
      for (const x of this.live.values()) x.refresh();
    }, every);
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
    await Promise.race([Promise.all(all), sleep(Math.floor(env.SHUTDOWN_TIMEOUT_MS * 0.7))]);
  }

  // ------------------------------------------------------------------ helpers

  private owned(executionId: string): LiveExecution {
    const x = this.live.get(executionId);
    if (!x) throw notFound('execution not found on this instance', { execution_id: executionId, instance_id: this.deps.instanceId });
    return x;
  }
}
