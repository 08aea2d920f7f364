import { z } from 'zod';
import { Actor, OperatorActor } from './envelope.js';
import { AuditEntry, Execution, QueuedMessage, Session, SessionDetail, Task, TaskWithSessions, Workspace } from './entities.js';
import { DeliveryMode, ExecutionStatus, McpMode, Protocol, TaskStatus } from './enums.js';
import { SUBJECT_PREFIX } from './subjects.js';
import { ErrorBody } from './errors.js';
import { Limits, text } from './text.js';

/** A request/reply endpoint: its subject, the request it accepts and the result it answers. */
export interface Endpoint<Req extends z.ZodType = z.ZodType, Res extends z.ZodType = z.ZodType> {
  /** Stable name, used in metrics and span names (`send kandev.orch.task.stop`). */
  readonly name: string;
  readonly subject: string;
  readonly request: Req;
  readonly result: Res;
  /**
   * Sending it twice has the effect of sending it once (a control whose repeat finds its work done:
   * stop, cancel, tree holds). The request client resends such a request once when the replica
   * that took it is gone (B-6, ADR 0062, packages/runtime rpc.ts `resendOnce`).
   */
  readonly idempotent?: boolean;
}
/** An endpoint served by one particular instance (the owner of an execution). */
export interface InstanceEndpoint<Req extends z.ZodType = z.ZodType, Res extends z.ZodType = z.ZodType> {
  readonly name: string;
  readonly at: (instanceId: string) => Endpoint<Req, Res>;
}
export type RequestOf<E> = E extends Endpoint<infer Q, z.ZodType> ? z.infer<Q> : E extends InstanceEndpoint<infer Q, z.ZodType> ? z.infer<Q> : never;
export type ResultOf<E> = E extends Endpoint<z.ZodType, infer R> ? z.infer<R> : E extends InstanceEndpoint<z.ZodType, infer R> ? z.infer<R> : never;

/** An endpoint of the catalogue: `kandev.<name>`, its request schema and its result schema. */
export const endpoint = <Req extends z.ZodType, Res extends z.ZodType>(name: string, request: Req, result: Res): Endpoint<Req, Res> => ({
  name,
  subject: `${SUBJECT_PREFIX}.${name}`,
  request,
  result,
});
/** Marks a control idempotent (see Endpoint.idempotent): what a replica's death may have cut short is sent again, once. */
export const idempotent = <E extends Endpoint>(e: E): E => ({ ...e, idempotent: true });
export const instanceEndpoint = <Req extends z.ZodType, Res extends z.ZodType>(
  service: string,
  name: string,
  request: Req,
  result: Res,
): InstanceEndpoint<Req, Res> => ({
  name: `${service}.*.${name}`,
  at: (instanceId: string) => ({ name: `${service}.*.${name}`, subject: `${SUBJECT_PREFIX}.${service}.${instanceId}.${name}`, request, result }),
});

const id = z.uuid();
const reason = text({ max: Limits.reason }).nullable().optional();
const title = text({ min: 1, max: Limits.title });
const description = text({ max: Limits.description });
const agentName = text({ min: 1, max: Limits.agent });
const prompt = text({ min: 1, max: Limits.prompt });
/**
 * Optional client-chosen key of a create or message: the same key again (from the same caller)
 * answers with the first result instead of acting twice (an agent retrying after a timeout).
 */
const idempotencyKey = text({ min: 1, max: Limits.idempotencyKey }).optional();

// ---------------------------------------------------------------- orchestrator (operator surface)
export const TaskStopExecution = z.object({ session_id: id, execution_id: id, orphaned: z.boolean() });
export const TaskStopResult = z.object({ task_id: id, status: z.literal('stopped'), executions: z.array(TaskStopExecution) });
export const RegistryEntryView = z.object({
  execution_id: id,
  session_id: id,
  status: ExecutionStatus,
  pid: z.number().int().nullable(),
  protocol: Protocol,
  instance_id: z.string(),
});

export const Orch = {
  workspaceCreate: endpoint('orch.workspace.create', z.object({ actor: OperatorActor, name: text({ min: 1, max: Limits.name }) }), Workspace),
  taskCreate: endpoint(
    'orch.task.create',
    z.object({
      actor: Actor,
      workspace_id: id,
      title,
      description: description.nullable().optional(),
      parent_id: id.nullable().optional(),
      office: z.boolean().optional(),
      agent: agentName.nullable().optional(),
      idempotency_key: idempotencyKey,
      /** Absolute, normalised, under KANDEV_WORK_DIR (checked by the orchestrator: VALIDATION_ERROR otherwise). */
      working_dir: text({ min: 1, max: 4096 }).nullable().optional(),
    }),
    Task,
  ),
  taskGet: endpoint('orch.task.get', z.object({ actor: Actor, task_id: id }), TaskWithSessions),
  taskUpdate: endpoint(
    'orch.task.update',
    z.object({ actor: Actor, task_id: id, title: title.optional(), status: TaskStatus.optional(), archived: z.boolean().optional() }),
    Task,
  ),
  /**
   * With `idempotency_key` (the gateway fills it from the `Idempotency-Key` header, B-7): a retry
   * with the same key on the same task answers the session the first one started, `replayed: true`
   * (HTTP 200), and launches nothing; the same key with another body is CONFLICT.
   */
  sessionStart: endpoint(
    'orch.session.start',
    z.object({ actor: Actor, task_id: id, agent: agentName.optional(), prompt: text({ max: Limits.prompt }).optional(), idempotency_key: idempotencyKey }),
    Session.extend({ replayed: z.boolean().optional() }),
  ),
  sessionGet: endpoint('orch.session.get', z.object({ actor: Actor, session_id: id }), SessionDetail),
  /** With `idempotency_key` (`Idempotency-Key` header): a retry answers the first turn's id, `replayed: true`, and starts no turn. */
  sessionPrompt: endpoint(
    'orch.session.prompt',
    z.object({ actor: Actor, session_id: id, prompt, idempotency_key: idempotencyKey }),
    z.object({ turn_id: id, replayed: z.boolean().optional() }),
  ),
  /** Idempotent: a repeat finds no turn in flight (a successful no-op, R-3.4). */
  agentCancel: idempotent(
    endpoint('orch.agent.cancel', z.object({ actor: Actor, session_id: id, reason }), z.object({ success: z.literal(true), session_id: id })),
  ),
  /** Idempotent: a repeat stops nothing twice. */
  taskStop: idempotent(endpoint('orch.task.stop', z.object({ actor: Actor, task_id: id, reason }), TaskStopResult)),
  taskExecutions: endpoint('orch.task.executions', z.object({ actor: Actor, task_id: id }), z.array(RegistryEntryView)),
  taskQueue: endpoint('orch.task.queue', z.object({ actor: Actor, task_id: id }), z.array(QueuedMessage)),
  /** DELETE /tasks/:id/queue/:message_id: the removed message; NOT_FOUND when it is not (or no longer) queued. */
  taskQueueDelete: endpoint('orch.task.queue.delete', z.object({ actor: Actor, task_id: id, message_id: id }), QueuedMessage),
  /**
   * POST /tasks/:id/queue/resume: the queue an operator's turn cancel paused runs again; the
   * next message goes at once when the task's session is idle (`delivered_message_id`), else after its turn.
   */
  taskQueueResume: endpoint(
    'orch.task.queue.resume',
    z.object({ actor: Actor, task_id: id }),
    z.object({ task_id: id, resumed: z.literal(true), delivered_message_id: id.nullable(), size: z.number().int() }),
  ),
  taskAudit: endpoint('orch.task.audit', z.object({ actor: Actor, task_id: id }), z.array(AuditEntry)),
  /** Lifecycle asks, under the task's row lock, whether a launch that just registered may live (B-1). */
  executionAdmit: endpoint(
    'orch.execution.admit',
    z.object({
      execution_id: id,
      task_id: id,
      session_id: id,
      fence_epoch: z.number().int().nonnegative(),
      instance_id: text({ min: 1, max: 200 }).optional(),
    }),
    z.object({ admitted: z.boolean(), reason: z.string().nullable() }),
  ),
} as const;

// ---------------------------------------------------------------- orchestrator (MCP surface; only the mcp service may publish here)
const callerTaskId = id;
/**
 * The calling agent's own MCP token, forwarded by the mcp service. The orchestrator verifies it
 * (audience, expiry, signature, task_id = caller_task_id) before anything else, so a request
 * published on kandev.orch.mcp.> by anyone who lacks the token is refused even where NATS
 * permissions are too wide. Optional in the schema only for wire compatibility: the orchestrator
 * refuses a request without it (UNAUTHORIZED).
 */
const agentToken = text({ min: 1, max: Limits.token }).optional();
export const McpStopResult = z.object({ task_id: id, status: z.enum(['stopped', 'not_running']) });
/** `session_id` is null when the message waits for a session the task does not have yet (a paused member, R-10.2). */
export const McpMessageResult = z.object({ task_id: id, session_id: id.nullable(), status: z.enum(['queued', 'sent', 'started']) });

export const OrchMcp = {
  /** Idempotent: a repeat answers `not_running` and changes nothing. */
  stopChildTask: idempotent(
    endpoint('orch.mcp.stop_child_task', z.object({ caller_task_id: callerTaskId, agent_token: agentToken, task_id: id }), McpStopResult),
  ),
  messageTask: endpoint(
    'orch.mcp.message_task',
    z.object({
      caller_task_id: callerTaskId,
      agent_token: agentToken,
      task_id: id,
      prompt,
      session_id: id.optional(),
      delivery_mode: DeliveryMode.optional(),
      idempotency_key: idempotencyKey,
    }),
    McpMessageResult,
  ),
  createTask: endpoint(
    'orch.mcp.create_task',
    z.object({
      caller_task_id: callerTaskId,
      agent_token: agentToken,
      title,
      description: description.optional(),
      agent: agentName.optional(),
      prompt: prompt.optional(),
      idempotency_key: idempotencyKey,
    }),
    Task.extend({ session_id: id.nullable() }),
  ),
  whoami: endpoint('orch.mcp.whoami', z.object({ caller_task_id: callerTaskId, agent_token: agentToken }), Task),
} as const;

// ---------------------------------------------------------------- lifecycle
export const LaunchRequest = z.object({
  execution_id: id,
  task_id: id,
  session_id: id,
  workspace_id: id,
  agent: agentName,
  fence_epoch: z.number().int().nonnegative(),
  /** Tool set of the agent's MCP token; unset = the lifecycle deployment's AGENT_MCP_MODE. */
  mcp_mode: McpMode.optional(),
  /** First prompt, sent once the agent is up. */
  prompt: text({ max: Limits.prompt }).optional(),
  turn_id: id.optional(),
  /** Context sent as its own block before the prompt (who sent it). */
  context: text({ max: 10_000 }).optional(),
  /**
   * The task's `working_dir` (absolute, under KANDEV_WORK_DIR); null/unset = lifecycle's default
   * `<KANDEV_WORK_DIR>/<workspace_id>/<task_id>`. lifecycle checks it again before using it.
   */
  working_dir: text({ min: 1, max: 4096 }).nullable().optional(),
});
export type LaunchRequest = z.infer<typeof LaunchRequest>;

/** One execution to stop (`Life.stop`, and each item of `Life.stopMany`). */
const ExecStopRequest = z.object({
  execution_id: id,
  reason: text({ min: 1, max: Limits.reason }),
  grace_ms: z.number().int().nonnegative().optional(),
  orphaned: z.boolean().optional(),
});
const ExecStopResult = z.object({ accepted: z.boolean(), execution_id: id, already_gone: z.boolean() });
/** `Life.drain`: how to treat the executions still running once `wait_ms` has passed. */
export const DrainMode = z.enum(['stop', 'wait']);
export const DrainRequest = z.object({
  mode: DrainMode.optional(),
  /** How long running executions may go on before `mode` applies; unset = the instance's DRAIN_WAIT_MS. */
  wait_ms: z.number().int().nonnegative().max(3_600_000).optional(),
  /** SIGTERM → SIGKILL grace of the stops `mode: "stop"` makes; unset = TEARDOWN_GRACE_MS. */
  grace_ms: z.number().int().nonnegative().max(600_000).optional(),
});
export const DrainReport = z.object({
  instance_id: z.string(),
  mode: DrainMode,
  /** Ended on their own (or by someone else's stop) while the drain waited. */
  finished: z.array(id),
  /** Torn down by the drain (`mode: "stop"`), reason `lifecycle_drain`. */
  stopped: z.array(id),
  /** Still running when the drain answered (`mode: "wait"`, or a stop that did not finish). */
  left: z.array(id),
  waited_ms: z.number().int().nonnegative(),
  took_ms: z.number().int().nonnegative(),
});
export type DrainReport = z.infer<typeof DrainReport>;

/** Stops per `Life.stopMany` request: a hold's members are at most MAX_HOLD_MEMBERS, its sessions may be more, so the sender splits. */
export const MAX_STOPS_PER_REQUEST = 1_000;

export const Life = {
  launch: endpoint('life.exec.launch', LaunchRequest, Execution),
  /**
   * Launch admission asked before the caller writes anything (ADR 0026): refused at once with
   * UNAVAILABLE and `retry_after_s` when the answering instance's queue predicts too long a wait;
   * otherwise that instance holds a place for this execution id until its launch arrives (or a TTL).
   */
  reserveLaunch: endpoint('life.exec.reserve', z.object({ execution_id: id }), z.object({ reserved: z.literal(true), instance_id: z.string() })),
  /** Names of the agents this lifecycle deployment can launch (the orchestrator checks a start against it before any write). */
  agents: endpoint('life.agent.list', z.object({}), z.object({ agents: z.array(z.string()) })),
  list: endpoint('life.exec.list', z.object({ task_id: id }), z.array(Execution)),
  /** `task_id`, when the caller knows it, makes this one exact-key read instead of a key search. */
  get: endpoint('life.exec.get', z.object({ execution_id: id, task_id: id.optional() }), Execution.nullable()),
  prompt: instanceEndpoint(
    'life',
    'exec.prompt',
    z.object({ execution_id: id, turn_id: id, prompt, context: text({ max: 10_000 }).optional() }),
    z.object({ turn_id: id }),
  ),
  cancel: instanceEndpoint(
    'life',
    'exec.cancel',
    z.object({
      execution_id: id,
      turn_id: id.nullable().optional(),
      /**
       * Tear the execution down when the agent does not acknowledge (R-3.4; default). An interrupt
       * passes false: its message stays queued and the agent keeps running.
       */
      escalate: z.boolean().optional(),
    }),
    z.object({ cancelled: z.boolean(), turn_id: id.nullable(), stop_reason: z.string().nullable(), reason: z.string().nullable() }),
  ),
  stop: instanceEndpoint('life', 'exec.stop', ExecStopRequest, ExecStopResult),
  /**
   * Several stops for one owner in one request (a tree hold's sessions), each handled as `stop`
   * handles it and answered in order; one refused (CONFLICT: another instance owns it) carries its
   * error and leaves the others as they are.
   */
  stopMany: instanceEndpoint(
    'life',
    'exec.stop_many',
    z.object({ stops: z.array(ExecStopRequest).min(1).max(MAX_STOPS_PER_REQUEST) }),
    z.object({ results: z.array(z.union([ExecStopResult, z.object({ execution_id: id, error: ErrorBody })])) }),
  ),
  /**
   * Drain one instance before it goes away (a rollout's preStop hook, an operator): it stops taking
   * launches at once (its queue-group launch subscriptions end, so the other instances get them;
   * its /readyz says not ready), waits up to `wait_ms` for its executions to end, and then, with
   * `mode: "stop"` (the default), tears the rest down through its stop pipeline; `mode: "wait"`
   * leaves them running. Answers when done with what happened to each. Idempotent: a second drain
   * joins the first. docs/operations.md, "Rolling out lifecycle".
   */
  drain: instanceEndpoint('life', 'drain', DrainRequest, DrainReport),
} as const;

/** A no-op endpoint every service serves; the gateway's /readyz and the floor benchmark use it. */
export const pingEndpoint = (service: string) =>
  endpoint(
    `${service}.ping`,
    z.object({}).passthrough(),
    // `details`: facts the service reports on its /readyz too (lifecycle: `agent_isolation`).
    z.object({ service: z.string(), instance_id: z.string(), details: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional() }),
  );
