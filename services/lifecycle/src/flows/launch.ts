import { CatalogueError, resolveAgent, type AgentSpec } from '@kandev/agentctl';
import { processRef } from '@kandev/runtime/host';
import { Orch, conflict, unavailable, validationError, type AgentctlReadyEvent, type Execution, type LaunchRequest } from '@kandev/contracts';
import { activity, request, signAgentToken } from '@kandev/runtime';
import { randomBytes, randomUUID } from 'node:crypto';
import { AgentctlClient } from '../agentctl/client.js';
import { AgentctlProcess } from '../agentctl/process.js';
import { abandonLaunch, type LaunchFailure } from '../domain/launch.js';
import { ownerSilenceBound } from '../domain/liveness.js';
import { mcpPublicUrl } from '../env.js';
import type { Placement } from '../isolation/agent-isolation.js';
import { readSettings, SettingsError, type AgentSettings } from '../isolation/agent-settings.js';
import type { LaunchGate } from '../launch-gate.js';
import { LiveExecution } from '../live-execution.js';
import type { Executions } from './context.js';
import { emit, relay } from './events.js';
import { readmit } from './readmit.js';
import { sendPrompt } from './turns.js';

/*
 * Launch (B-1) as a pipeline: spawn → ready → admit → first prompt. Before spawn nothing exists,
 * so a refusal is only an answer. From spawn on, every way a launch can end short of running — a
 * step failing, or a stop landing between steps — is thrown as a LaunchFailure and handled in one
 * place, `abandon`: it logs once, tears down what was spawned (joining the stop's own teardown
 * when there is one, so `execution.stopped` says why it ended) and gives the answer
 * (domain/launch.ts). The waits inherit the caller's deadline (the request deadline header).
 */

class LaunchAborted extends Error {
  constructor(readonly failure: LaunchFailure) {
    super(failure.step);
  }
}

/** Launch one execution; `gate` bounds how many start at once and how long the rest wait. */
export async function launch(ctx: Executions, gate: LaunchGate, req: LaunchRequest): Promise<Execution> {
  const retried = alreadyHere(ctx, req);
  if (retried) return retried;
  // Overload: start now, wait a bounded time in this instance's queue, or be refused at once (503).
  const releaseSlot = await gate.acquire(req.execution_id);
  try {
    // Checked again after the wait in the queue: shutdown, or a retry of this launch, may have come first.
    const retriedMeanwhile = alreadyHere(ctx, req);
    if (retriedMeanwhile) return retriedMeanwhile;
    const prepared = await activity('launch.prepare', () => prepare(ctx, req));
    const started = performance.now();
    // A uid of its own and its task's directory, owned by it; refusals here change nothing.
    const placement = await activity('launch.place', () =>
      ctx.deps.isolation.place(req.execution_id, req.workspace_id, req.task_id, req.working_dir, prepared.settings),
    );
    let x: LiveExecution;
    try {
      x = activity('launch.spawn', () => spawn(ctx, req, prepared, placement));
    } catch (e) {
      await ctx.deps.isolation.finish(placement);
      throw e;
    }
    try {
      const ready = await untilReady(x, releaseSlot);
      stillWanted(x);
      await register(ctx, x, ready, started);
      await admit(ctx, x, req);
      stillWanted(x);
      await firstPrompt(x, req);
    } catch (e) {
      throw await abandon(ctx, x, e);
    }
    await emit(ctx.deps.journal, x, 'execution.ready', { execution: x.record });
    x.log.info({ launch_ms: Math.round(performance.now() - started) }, 'execution launched');
    return x.record;
  } finally {
    releaseSlot();
  }
}

/** A retried launch of an execution this instance runs is answered with it, never a second agent; null: go on. */
function alreadyHere(ctx: Executions, req: LaunchRequest): Execution | null {
  if (ctx.shuttingDown()) throw unavailable('lifecycle instance is shutting down');
  const existing = ctx.live.get(req.execution_id);
  if (!existing) return null;
  if (existing.teardown) throw conflict('execution is being stopped', { execution_id: req.execution_id });
  return existing.record;
}

/** Everything that can refuse the launch before a process exists. */
async function prepare(ctx: Executions, req: LaunchRequest): Promise<Prepared> {
  const { registry, env, agentKey } = ctx.deps;
  const elsewhere = await registry.get(req.execution_id, req.task_id);
  if (elsewhere) throw conflict(`execution is already registered by ${elsewhere.instance_id}`, { execution_id: req.execution_id });
  let spec: AgentSpec;
  try {
    spec = resolveAgent(req.agent);
  } catch (e) {
    if (e instanceof CatalogueError) throw validationError(e.message, { agent: req.agent });
    throw e;
  }
  // Read before a uid is taken: a source broken since the start (R-10.6 checked it then) refuses
  // this launch in the same words, and nothing has been placed yet.
  let settings: AgentSettings | undefined;
  try {
    settings = spec.settings_from ? await readSettings(spec.name, spec.settings_from) : undefined;
  } catch (e) {
    if (e instanceof SettingsError) throw unavailable(e.message, { agent: req.agent });
    throw e;
  }
  const token = await signAgentToken(agentKey, {
    task_id: req.task_id,
    session_id: req.session_id,
    execution_id: req.execution_id,
    mode: req.mcp_mode ?? env.AGENT_MCP_MODE,
  });
  return { protocol: spec.protocol, token, settings };
}

interface Prepared {
  protocol: Execution['protocol'];
  token: string;
  settings: AgentSettings | undefined;
}

/** Step 1: agentctl is started and the execution is registered STARTING (memory, KV, state file). */
function spawn(ctx: Executions, req: LaunchRequest, prepared: Prepared, placement: Placement): LiveExecution {
  const { deps } = ctx;
  const { env } = deps;
  const log = deps.log.child({ task_id: req.task_id, session_id: req.session_id, execution_id: req.execution_id });
  // agentctl answers only the holder of this, and only this instance has it.
  const secret = randomBytes(32).toString('base64url');
  let logFile = deps.stateFile.agentctlLogPath(req.execution_id);
  try {
    logFile = deps.stateFile.createAgentctlLog(req.execution_id, placement.identity);
  } catch (e) {
    log.warn({ err: e, path: logFile }, "cannot create agentctl's log file; what it logs after this instance is gone is lost");
  }
  const proc = AgentctlProcess.spawn({
    bin: deps.agentctlBin,
    agent: req.agent,
    executionId: req.execution_id,
    sessionId: req.session_id,
    taskId: req.task_id,
    mcpUrl: mcpPublicUrl(env),
    mcpToken: prepared.token,
    cancelTimeoutMs: env.CANCEL_TIMEOUT_MS,
    handshakeTimeoutMs: env.LAUNCH_TIMEOUT_MS,
    exitWithParent: env.AGENTS_EXIT_WITH_LIFECYCLE,
    ownerSilenceMs: ownerSilenceBound(env.REGISTRY_TTL_MS, env.AGENT_OWNER_SILENCE_MS),
    agentNice: env.AGENT_NICE,
    logFile,
    secret,
    identity: placement.identity,
    cwd: placement.cwd,
    home: placement.home,
    tmp: placement.tmp,
    passEnv: env.AGENT_ENV_PASSTHROUGH,
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
      protocol: prepared.protocol,
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
  x.placement = placement;
  x.secret = secret;
  x.onLapse = (gapMs) => void readmit(ctx, x, gapMs);
  ctx.live.set(x.id, x);
  recordProcesses(ctx, x);
  void x.persist();
  // agentctl ending without a stop: behind every line it wrote (an agent_exited line says more).
  // During launch the failed `ready` step covers it.
  void proc.closed.then((exit) =>
    x.inOrder(async () => {
      if (x.teardown || x.record.status === 'STARTING') return;
      log.warn({ exit_code: exit.code, signal: exit.signal }, 'agentctl exited on its own');
      void ctx.teardowns.teardown(x, { reason: 'agentctl_exited', graceMs: env.TEARDOWN_GRACE_MS, orphaned: false, agentctlDied: exit });
    }),
  );
  log.info(
    { agent: req.agent, agentctl_pid: proc.pid, fence_epoch: req.fence_epoch, uid: placement.identity?.uid ?? null, cwd: placement.cwd },
    'launching execution',
  );
  return x;
}

/** Step 2: agentctl's `ready` line (the agent is up and its handshake done). The launch slot is given back either way. */
async function untilReady(x: LiveExecution, releaseSlot: () => void): Promise<AgentctlReadyEvent> {
  try {
    return await x.agentctl.ready;
  } catch (e) {
    throw new LaunchAborted({ step: 'ready', cause: e });
  } finally {
    releaseSlot();
  }
}

/** A stop that landed during the last step ends the launch here, before the next one. */
function stillWanted(x: LiveExecution): void {
  if (x.teardown) throw new LaunchAborted({ step: 'stopped' });
}

/** The agent is up: READY in the registry, its lines relayed, `execution.registered`. */
async function register(ctx: Executions, x: LiveExecution, ready: AgentctlReadyEvent, started: number): Promise<void> {
  x.client = new AgentctlClient(ready.url, x.secret);
  x.agentRef = processRef(ready.agent_pid);
  x.update({ status: 'READY', pid: ready.agent_pid, agentctl_url: ready.url, protocol: ready.protocol });
  recordProcesses(ctx, x);
  x.agentctl.listen((ev) => void x.inOrder(() => relay(ctx, x, ev)));
  await x.persist();
  x.log.info({ pid: ready.agent_pid, url: ready.url, ready_ms: Math.round(performance.now() - started) }, 'agent ready');
  await emit(ctx.deps.journal, x, 'execution.registered', { execution: x.record });
}

/**
 * Step 3, B-1: the orchestrator decides, under the task's row lock, whether this launch may live.
 * A refusal or silence ends it before anything reaches the agent.
 */
async function admit(ctx: Executions, x: LiveExecution, req: LaunchRequest): Promise<void> {
  const { nc, instanceId, env } = ctx.deps;
  let admission: { admitted: boolean; reason: string | null };
  try {
    admission = await request(
      nc,
      Orch.executionAdmit,
      { execution_id: x.id, task_id: req.task_id, session_id: req.session_id, fence_epoch: req.fence_epoch, instance_id: instanceId },
      { timeoutMs: env.REQUEST_TIMEOUT_MS },
    );
  } catch (e) {
    admission = { admitted: false, reason: `orchestrator unreachable (${(e as Error).message})` };
  }
  if (!admission.admitted) throw new LaunchAborted({ step: 'admit', refusal: admission.reason ?? 'not admitted' });
}

/** Step 4: the launch's own prompt, if it carries one. */
async function firstPrompt(x: LiveExecution, req: LaunchRequest): Promise<void> {
  if (!req.prompt) return;
  try {
    await sendPrompt(x, req.turn_id ?? randomUUID(), req.prompt, req.context);
  } catch (e) {
    throw new LaunchAborted({ step: 'first_prompt', cause: e });
  }
}

/** The one failure path from spawn on: log once, tear down (or join the stop's teardown), answer. */
async function abandon(ctx: Executions, x: LiveExecution, e: unknown): Promise<unknown> {
  const failure: LaunchFailure = e instanceof LaunchAborted ? e.failure : { step: 'unexpected', cause: e };
  const plan = abandonLaunch(failure, x.teardown !== null, x.id);
  const cause = 'cause' in failure ? failure.cause : undefined;
  x.log[plan.log.level]({ step: failure.step, reason: plan.teardown.reason, ...(cause === undefined ? {} : { err: cause }) }, plan.log.message);
  await ctx.teardowns.teardown(x, { reason: plan.teardown.reason, graceMs: plan.teardown.graceful ? ctx.deps.env.TEARDOWN_GRACE_MS : 0, orphaned: false });
  return 'rethrow' in plan.answer ? plan.answer.rethrow : plan.answer;
}

/** What start-up cleanup needs after a crash: the processes of this execution. */
function recordProcesses(ctx: Executions, x: LiveExecution): void {
  try {
    ctx.deps.stateFile.set({
      execution_id: x.id,
      workspace_id: x.record.workspace_id,
      task_id: x.record.task_id,
      session_id: x.record.session_id,
      agentctl: { pid: x.agentctl.ref.pid, start_time: x.agentctl.ref.startTime },
      agent: x.agentRef ? { pid: x.agentRef.pid, start_time: x.agentRef.startTime } : null,
      uid: x.placement?.identity?.uid ?? null,
    });
  } catch (e) {
    x.log.error({ err: e }, 'state file write failed; a crash now would leave this execution to TTL expiry only');
  }
}
