import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertInvariants,
  ControlLog,
  eventually,
  processAlive,
  WsClient,
  type ControlRequest,
  type InvariantBounds,
  type StackOptions,
  type StackService,
  type TestNatsCluster,
} from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * The stack the fault tests run: a short registry TTL and reconcile interval so a fault's
 * recovery fits a test, and the invariant checker's bounds derived from them. Below it, the fault
 * matrix: control operations (stop, interrupt, cancel) × faults, each fault injected in the middle
 * of the operation, every case ending with the invariant checker over the operation's answer.
 */
export const REGISTRY_TTL_MS = 3_000;
export const RECONCILE_INTERVAL_MS = 1_000;
export const TEARDOWN_GRACE_MS = 500;
/** Lifecycle's bound on an agent's cancel acknowledgement, and the orchestrator's on lifecycle's answer (≥ that + 2 s). */
export const CANCEL_TIMEOUT_MS = 1_000;
export const LIFECYCLE_CANCEL_WAIT_MS = 4_000;
export const bounds: InvariantBounds = {
  graceMs: TEARDOWN_GRACE_MS + 2_000,
  // Registry lapse + reconciler's settle time (5 s) + one interval, + a cancel or a prompt hand-off in
  // flight holding the session (its owner died mid-request) for up to LIFECYCLE_CANCEL_WAIT_MS (the
  // prompt's bound is set to the same).
  reconcileMs: REGISTRY_TTL_MS + 5_000 + RECONCILE_INTERVAL_MS + LIFECYCLE_CANCEL_WAIT_MS,
};
/** Recovery headroom on a busy machine, on top of the bounds. */
export const WITHIN_MS = bounds.reconcileMs + 20_000;
/**
 * The deadline of every API call, /ws action and MCP tool call in the fault world: above a launch
 * (3 s queue wait + the launch) on a busy machine. A request published while NATS reconnects, or
 * held by a service that is killed, is answered with its timeout error only when this runs out.
 */
export const REQUEST_TIMEOUT_MS = 15_000;
/**
 * A wakeup claimed by a holds process that dies is claimed again after this (its launch, keyed by
 * the wakeup, then finds the session the first one started): the service's default, not set here,
 * so the matrix holds the default to its bound. A live dispatcher renews its claims, so this need
 * not cover a launch's length (ADR 0037).
 */
export const WAKEUP_CLAIM_TIMEOUT_MS = 10_000;
/** How long an agent's ask_user_questions waits for an answer (the bundle's expiry), and its waiter lease. */
export const CLARIFICATION_TIMEOUT_MS = 30_000;
export const CLARIFICATION_LEASE_MS = 6_000;
/** Every caller is answered (a result or an error) within its request deadline; slack for a busy machine. */
export const ANSWER_DEADLINE_MS = REQUEST_TIMEOUT_MS + 5_000;
/** A launch is answered within its request deadline; one lost to a fault is retried once. */
const LAUNCH_BOUND_MS = 2 * REQUEST_TIMEOUT_MS + 5_000;

export const startFaultWorld = (topology: Pick<StackOptions, 'natsCluster' | 'replicas'> = {}): Promise<World> =>
  startWorld(
    {
      REGISTRY_TTL_MS: String(REGISTRY_TTL_MS),
      RECONCILE_INTERVAL_MS: String(RECONCILE_INTERVAL_MS),
      TEARDOWN_GRACE_MS: String(TEARDOWN_GRACE_MS),
      CANCEL_TIMEOUT_MS: String(CANCEL_TIMEOUT_MS),
      LIFECYCLE_CANCEL_WAIT_MS: String(LIFECYCLE_CANCEL_WAIT_MS),
      LIFECYCLE_PROMPT_WAIT_MS: String(LIFECYCLE_CANCEL_WAIT_MS),
      GATEWAY_REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
      MCP_TOOL_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
      LAUNCH_CONCURRENCY: '2',
      LAUNCH_QUEUE_WAIT_MS: '3000',
      WAKEUP_LAUNCH_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS),
      CLARIFICATION_TIMEOUT_MS: String(CLARIFICATION_TIMEOUT_MS),
      CLARIFICATION_LEASE_MS: String(CLARIFICATION_LEASE_MS),
    },
    topology,
  );

/** The running agent's pid of a task's session, remembered in `pids` for the checker. */
export async function agentOf(w: World, pids: Map<string, number>, taskId: string, sessionId: string): Promise<number> {
  const e = await eventually(async () => {
    const list = (await w.api.get(`/tasks/${taskId}/executions`)).body as Array<{ session_id: string; pid: number | null; status: string }>;
    return list.find((x) => x.session_id === sessionId && x.pid && (x.status === 'RUNNING' || x.status === 'READY')) ?? null;
  }, LAUNCH_BOUND_MS);
  pids.set(sessionId, e.pid!);
  return e.pid!;
}

/**
 * Start a session whose agent is in the middle of a long turn. A start refused with 503 is tried
 * again after its Retry-After, as a client is told to: the fault world admits 2 launches at a time
 * with a 3 s queue wait, which a busy machine can exceed (that refusal is the overload contract,
 * not a fault of the test's making).
 */
export async function startRunning(
  w: World,
  pids: Map<string, number>,
  taskId: string,
  prompt = sleepScript(120_000),
): Promise<{ sessionId: string; pid: number }> {
  const deadline = Date.now() + LAUNCH_BOUND_MS;
  for (;;) {
    const r = await w.api.post(`/tasks/${taskId}/sessions`, { prompt });
    if (r.status === 201) {
      const pid = await agentOf(w, pids, taskId, r.body.id);
      await eventually(async () => w.agentEvents(pid).some((e) => e.kind === 'prompt'), LAUNCH_BOUND_MS);
      return { sessionId: r.body.id, pid };
    }
    if (r.status !== 503 || Date.now() > deadline) throw new Error(`session start → ${r.status} ${JSON.stringify(r.body)}`);
    await new Promise((res) => setTimeout(res, 1_000 * Number(r.body.error?.details?.retry_after_s ?? 1)));
  }
}

/** One control request, prepared against a running agent. */
interface Prepared {
  /** Send it through its public surface; resolves with the recorded request and answer. */
  send(log: ControlLog): Promise<ControlRequest>;
  /** Resolves when the operation is half done, as the agent sees it, or when `answered` settles first (it never got there). */
  midpoint(answered: Promise<unknown>): Promise<void>;
  tasks: string[];
  close(): void;
}
export interface Operation {
  name: 'stop' | 'interrupt' | 'cancel' | 'tree pause' | 'tree cancel' | 'tree resume' | 'tree restore';
  prepare(w: World, pids: Map<string, number>): Promise<Prepared>;
}

/** Resolves once the agent `pid` logs an event of `kind` after the call, or once `until` settles. */
function agentSees(w: World, pid: number, kind: 'cancel' | 'sigterm'): (until: Promise<unknown>) => Promise<void> {
  return async (until) => {
    let settled = false;
    void until.finally(() => (settled = true));
    const seen = w.agentEvents(pid).filter((e) => e.kind === kind).length;
    while (!settled && w.agentEvents(pid).filter((e) => e.kind === kind).length <= seen) await new Promise((r) => setTimeout(r, 2));
  };
}

export const OPERATIONS: readonly Operation[] = [
  {
    // An operator's task stop (R-2); half done when the agent gets its SIGTERM (stop accepted, teardown under way).
    name: 'stop',
    async prepare(w, pids) {
      const { task } = await makeTask(w.api);
      const { pid } = await startRunning(w, pids, task.id);
      return { tasks: [task.id], send: (log) => log.stopTask(task.id), midpoint: agentSees(w, pid, 'sigterm'), close: () => undefined };
    },
  },
  {
    // A parent's message interrupt (R-1.8); half done when the child's agent is asked to cancel its turn (before the new turn is dispatched).
    name: 'interrupt',
    async prepare(w, pids) {
      const { workspace_id, task: parent } = await makeTask(w.api, { title: 'coordinator' });
      const { task: child } = await makeTask(w.api, { workspace_id, parent_id: parent.id, title: 'worker' });
      const { pid } = await startRunning(w, pids, child.id);
      const token = await w.stack.agentToken(parent.id);
      const prompt = JSON.stringify({ script: [{ say: 'steered' }], tag: randomUUID() });
      return {
        tasks: [parent.id, child.id],
        send: (log) => log.interrupt(token, child.id, prompt),
        midpoint: agentSees(w, pid, 'cancel'),
        close: () => undefined,
      };
    },
  },
  {
    // An operator's turn cancel over /ws (R-3); half done when the agent is asked to cancel.
    name: 'cancel',
    async prepare(w, pids) {
      const { task } = await makeTask(w.api);
      const { sessionId, pid } = await startRunning(w, pids, task.id);
      const ws = await WsClient.connect(w.stack.wsUrl, w.token);
      return { tasks: [task.id], send: (log) => log.cancelTurn(ws, task.id, sessionId), midpoint: agentSees(w, pid, 'cancel'), close: () => ws.close() };
    },
  },
];

/** A root task with one child, an agent in the middle of a long turn on each. */
async function runningTree(w: World, pids: Map<string, number>) {
  const { workspace_id, task: root } = await makeTask(w.api, { title: 'root' });
  const { task: child } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'child' });
  const agents = await Promise.all([startRunning(w, pids, root.id), startRunning(w, pids, child.id)]);
  return { root, child, agents };
}

/** Resolves when the first of the agents `pids` sees `kind`, or when `until` settles. */
const anyAgentSees = (w: World, pids: readonly number[], kind: 'cancel' | 'sigterm') => (until: Promise<unknown>) =>
  Promise.race(pids.map((pid) => agentSees(w, pid, kind)(until)));

/**
 * The tree controls (R-4) through the HTTP API. Pause and cancel are half done when the first of
 * the tree's agents gets its SIGTERM (the hold is committed, the teardowns are under way). Resume
 * and restore act on a tree held beforehand (its agents gone): the fault lands as the release is
 * sent, which is all there is to observe of it from outside before its answer.
 */
export const TREE_OPERATIONS: readonly Operation[] = (['pause', 'cancel'] as const).flatMap((mode): Operation[] => [
  {
    name: `tree ${mode}`,
    async prepare(w, pids) {
      const { root, child, agents } = await runningTree(w, pids);
      return {
        tasks: [root.id, child.id],
        send: (log) => log.holdTree(root.id, mode),
        midpoint: anyAgentSees(
          w,
          agents.map((a) => a.pid),
          'sigterm',
        ),
        close: () => undefined,
      };
    },
  },
  {
    name: mode === 'pause' ? 'tree resume' : 'tree restore',
    async prepare(w, pids) {
      const { root, child, agents } = await runningTree(w, pids);
      await w.api.ok('POST', `/tasks/${root.id}/tree/${mode}`);
      await eventually(async () => agents.every((a) => !processAlive(a.pid)), LAUNCH_BOUND_MS);
      const release = mode === 'pause' ? 'resume' : 'restore';
      return { tasks: [root.id, child.id], send: (log) => log.releaseTree(root.id, release), midpoint: async () => undefined, close: () => undefined };
    },
  },
]);

export interface Fault {
  name: string;
  /** Inject the fault in the middle of the operation and bring the faulty part back; resolves with the operation's answer. */
  during(w: World, op: Prepared, log: ControlLog): Promise<ControlRequest>;
}

/** The operation's midpoint, or its answer if it never gets there (refused before reaching the agent). */
const midway = (op: Prepared, inflight: Promise<ControlRequest>) => op.midpoint(inflight);

/** kill -9 of one service in the middle of the operation; restarted at once, as `npm start` supervises it. */
export const kill9 = (service: StackService): Fault => ({
  name: `kill -9 of ${service}`,
  async during(w, op, log) {
    const inflight = op.send(log);
    await midway(op, inflight);
    w.stack.services.get(service)!.process.kill('SIGKILL');
    const [answer] = await Promise.all([inflight, w.stack.restart(service)]);
    return answer;
  },
});

/**
 * kill -9 of the replica of a service that serves the operation (the service runs 2 processes),
 * in the middle of the operation: the survivor carries on; the replica is started again, with its
 * instance id, as Kubernetes would. Which replica serves it:
 * - orchestrator: the one NATS's queue group handed the decision to, killed inside its transaction
 *   (`killDecidingOrchestrator`);
 * - lifecycle: the owner of the operation's agent (the second process when none runs);
 * - gateway, mcp: the first, which the test's clients address;
 * - holds: either (it is told of holds as a queue group, after the decision): the second process.
 */
export const kill9Replica = (service: StackService): Fault => ({
  name: `kill -9 of the ${service} replica serving it`,
  async during(w, op, log) {
    if (w.stack.replicas(service).length === 0) throw new Error(`kill9Replica: the stack runs no ${service} replica`);
    if (service === 'orchestrator') return killDecidingOrchestrator(w, op, log);
    const victim = (service === 'lifecycle' ? await ownerOfAgent(w, op) : service === 'holds' ? undefined : `${service}-1`) ?? `${service}-2`;
    const inflight = op.send(log);
    await midway(op, inflight);
    w.stack.instance(victim)!.process.kill('SIGKILL');
    const [answer] = await Promise.all([inflight, w.stack.restartInstance(victim)]);
    return answer;
  },
});

/** The lifecycle instance that owns a running agent of the operation's tasks, if one runs (a tree release acts on a tree whose agents are gone). */
async function ownerOfAgent(w: World, op: Prepared): Promise<string | undefined> {
  for (const taskId of op.tasks) {
    const list = (await w.api.get(`/tasks/${taskId}/executions`)).body as Array<{ status: string; instance_id: string }>;
    const running = list.find((e) => e.status === 'RUNNING' || e.status === 'READY');
    if (running) return running.instance_id;
  }
  return undefined;
}

/** The decision of an operation, killed with its orchestrator replica inside its transaction (`killOrchestratorWaitingOn`). */
async function killDecidingOrchestrator(w: World, op: Prepared, log: ControlLog): Promise<ControlRequest> {
  let inflight: Promise<ControlRequest> | undefined;
  const victim = await killOrchestratorWaitingOn(
    w,
    // Every decision about a task takes its row's lock: the fence bump, the subtree lock, or a foreign-key check of a row it writes.
    (tx) => tx`SELECT id FROM orchestrator.tasks WHERE id = ANY(${op.tasks}::uuid[]) FOR UPDATE`,
    () => {
      inflight = op.send(log);
      return inflight;
    },
  );
  const [answer] = await Promise.all([inflight!, w.stack.restartInstance(victim)]);
  return answer;
}

/**
 * kill -9 of the orchestrator replica whose transaction waits for the rows `lock` takes. A queue
 * group hands a request to either replica, so the test makes the choice visible: it takes the
 * rows' locks, then `start`s what will need them, finds the transaction that queues behind its own
 * in pg_stat_activity, reads the replica off that connection's name (`kandev-orchestrator:<instance>`),
 * kills that process and only then lets the locks go: the killed transaction never commits. Fails
 * if what `start` returned settles first (it did not wait for the rows). Returns the killed
 * instance id; the caller starts it again.
 */
export async function killOrchestratorWaitingOn(
  w: World,
  lock: (tx: postgres.TransactionSql) => Promise<unknown>,
  start: () => Promise<unknown> | void,
): Promise<string> {
  const sql = postgres(w.stack.db.url, { max: 2, onnotice: () => undefined });
  try {
    return await sql.begin(async (tx) => {
      await lock(tx);
      const [me] = await tx<{ locker: number }[]>`SELECT pg_backend_pid() AS locker`;
      const locker = me!.locker;
      let settled = false;
      void start()?.then(
        () => (settled = true),
        () => (settled = true),
      );
      const end = Date.now() + REQUEST_TIMEOUT_MS;
      let victim: string | undefined;
      while (!victim) {
        const [row] = await sql<{ name: string }[]>`
          SELECT application_name AS name FROM pg_stat_activity
          WHERE ${locker} = ANY(pg_blocking_pids(pid)) AND application_name LIKE 'kandev-orchestrator:%'`;
        if (row) victim = row.name.slice('kandev-orchestrator:'.length);
        else if (settled || Date.now() > end)
          throw new Error(`no orchestrator transaction waited for the locked rows (${settled ? 'answered first' : 'timed out'})`);
        else await new Promise((r) => setTimeout(r, 10));
      }
      const replica = w.stack.instance(victim);
      if (!replica) throw new Error(`no stack process runs as ${victim}`);
      const exited = new Promise((r) => replica.process.once('exit', r));
      replica.process.kill('SIGKILL');
      // A process that had already exited fires no 'exit' again.
      if (replica.process.exitCode === null && replica.process.signalCode === null) await exited;
      console.info(`[fault] killed ${victim} in the middle of its transaction`);
      return victim;
    });
  } finally {
    await sql.end();
  }
}

/** kill -9 of one node of the NATS cluster in the middle of the operation, started again 2 s later. */
export const kill9NatsNode: Fault = {
  name: 'kill -9 of one NATS cluster node',
  async during(w, op, log) {
    const nats = w.stack.nats as TestNatsCluster;
    if (!nats.nodes) throw new Error('kill9NatsNode: the stack runs on one nats-server, not a cluster');
    const node = nats.nodes[1]!;
    const inflight = op.send(log);
    await midway(op, inflight);
    node.kill();
    await new Promise((r) => setTimeout(r, 2_000));
    await node.start();
    return inflight;
  },
};

/** lifecycle SIGSTOPped for twice the registry TTL (past the reconciler's give-up), the operation sent meanwhile. */
export const lifecycleStall: Fault = {
  name: 'SIGSTOP/SIGCONT of lifecycle past the registry TTL',
  async during(w, op, log) {
    const lifecycle = w.stack.services.get('lifecycle')!;
    lifecycle.process.kill('SIGSTOP');
    try {
      const inflight = op.send(log);
      await new Promise((r) => setTimeout(r, 2 * REGISTRY_TTL_MS + 5_000 + RECONCILE_INTERVAL_MS));
      lifecycle.process.kill('SIGCONT');
      return await inflight;
    } finally {
      lifecycle.process.kill('SIGCONT');
    }
  },
};

/** nats-server stopped in the middle of the operation, started again 2 s later (same port and store). */
export const natsRestart: Fault = {
  name: 'restart of nats-server',
  async during(w, op, log) {
    const inflight = op.send(log);
    await midway(op, inflight);
    await w.stack.nats.restart(2_000);
    return inflight;
  },
};

/**
 * PostgreSQL refusing connections to the system's database for 3 s, its open connections dropped,
 * at the operation's midpoint: a cancel's or interrupt's transaction is open then (the agent was
 * just asked to cancel), so it cannot commit what the agent already did.
 */
export const pgRefusing: Fault = {
  name: 'PostgreSQL refusing connections for 3 s',
  async during(w, op, log) {
    const admin = postgres(w.stack.db.url.replace(/\/[^/?]+(\?|$)/, '/postgres$1'), { max: 1, onnotice: () => undefined });
    const db = w.stack.db.name;
    await admin`SELECT 1`;
    try {
      const inflight = op.send(log);
      await midway(op, inflight);
      await admin.unsafe(`ALTER DATABASE ${db} WITH ALLOW_CONNECTIONS false`);
      await admin`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${db} AND pid <> pg_backend_pid()`;
      await new Promise((r) => setTimeout(r, 3_000));
      await admin.unsafe(`ALTER DATABASE ${db} WITH ALLOW_CONNECTIONS true`);
      return await inflight;
    } finally {
      await admin.unsafe(`ALTER DATABASE ${db} WITH ALLOW_CONNECTIONS true`).catch(() => undefined);
      await admin.end();
    }
  },
};

/**
 * Every service must outlive every fault: a service that exited fails the case, with its log. (The
 * PostgreSQL fault used to crash the orchestrator through a postgres.js 3 defect, which postgres.js 4
 * does not have, ADR 0070: a crash there is a regression now, not a known one.)
 */
function assertAllRunning(w: World, when: string): void {
  for (const [name, p] of w.stack.services) {
    if (p.process.exitCode === null && p.process.signalCode === null) continue;
    throw new Error(`${name} exited (${p.process.exitCode ?? p.process.signalCode}) ${when}:\n${w.stack.logTail(name).join('\n')}`);
  }
}

/** The last lines the orchestrator and lifecycle logged (warnings and errors at the stack's default level): what a failed case needs to be read. */
const serviceLogs = (w: World) => (['orchestrator', 'lifecycle'] as const).map((n) => `--- ${n} log, last lines:\n${w.stack.logTail(n).join('\n')}`).join('\n');

/**
 * One case of the matrix: prepare the operation against a running agent, inject the fault in its
 * middle, then require the invariant checker to pass over what the caller was told, and the
 * system to serve again (a new session starts and stops).
 */
export async function runFaultCase(w: World, pids: Map<string, number>, op: Operation, fault: Fault): Promise<ControlRequest> {
  const log = new ControlLog({ gatewayUrl: w.stack.gatewayUrl, mcpUrl: w.stack.mcpUrl, operatorToken: w.token });
  const prepared = await op.prepare(w, pids);
  let answer: ControlRequest;
  try {
    answer = await fault.during(w, prepared, log);
    assertAllRunning(w, `during ${fault.name}`);
    const tookMs = answer.answeredAt.getTime() - answer.sentAt.getTime();
    console.info(
      `[fault] ${op.name} × ${fault.name}: ${answer.answer.ok ? `ok ${JSON.stringify(answer.answer.body).slice(0, 300)}` : answer.answer.error} after ${tookMs} ms`,
    );
    // A caller whose request died with a replica is told so (or answered) within its deadline, never left waiting.
    if (answer.answer.ok !== null && tookMs > ANSWER_DEADLINE_MS)
      throw new Error(`${op.name} × ${fault.name}: answered after ${tookMs} ms, past the ${ANSWER_DEADLINE_MS} ms deadline`);
    await assertInvariants(w.stack, { agentPids: pids, bounds, requests: log, withinMs: WITHIN_MS }).catch((e: unknown) => {
      throw new Error(`${(e as Error).message}\n${serviceLogs(w)}`);
    });
  } finally {
    prepared.close();
  }
  assertAllRunning(w, `after ${fault.name}`);
  // Serves again, at the first try: a new session starts and stops. What a fault left behind (a
  // connection PostgreSQL terminated, a NATS connection re-established) must not fail the first
  // request a user sends after it (the driver settles a lost connection at once, ADR 0030).
  const { task } = await makeTask(w.api);
  await startRunning(w, pids, task.id);
  expect((await w.api.post(`/tasks/${task.id}/stop`)).status).toBe(200);
  // Nothing of this case keeps running into the next one: each task stop reaches what runs (200) or finds nothing (404).
  for (const id of prepared.tasks) {
    const r = await w.api.post(`/tasks/${id}/stop`);
    if (r.status !== 200 && r.status !== 404) throw new Error(`cleanup stop of task ${id} → ${r.status} ${JSON.stringify(r.body)}\n${serviceLogs(w)}`);
  }
  return answer;
}

/**
 * The calling test file's fault world: started before its tests and stopped after them. `world()`
 * is valid inside tests; `agentPids` collects each session's agent pid for the invariant checker.
 */
export function useFaultWorld(topology: Pick<StackOptions, 'natsCluster' | 'replicas'> = {}): { world: () => World; agentPids: Map<string, number> } {
  let w: World | undefined;
  const agentPids = new Map<string, number>();
  beforeAll(async () => {
    w = await startFaultWorld(topology);
  }, 120_000);
  afterAll(async () => w?.stop());
  return {
    world: () => {
      if (!w) throw new Error('the fault world is not started (use it inside a test)');
      return w;
    },
    agentPids,
  };
}

/** The matrix as tests of the calling file: each fault × every operation, one `runFaultCase` each. */
export function faultMatrix(
  fw: ReturnType<typeof useFaultWorld>,
  faults: readonly Fault[],
  caseTitle = 'in the middle of a $name',
  operations: readonly Operation[] = OPERATIONS,
): void {
  describe.each(faults)('$name', (fault) => {
    it.each(operations)(caseTitle, (op) => runFaultCase(fw.world(), fw.agentPids, op, fault).then(() => undefined), 180_000);
  });
}
