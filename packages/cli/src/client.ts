import type {
  Inbox,
  InboxItem,
  Orch,
  OrchOperatorExtras,
  OrchTree,
  QueuedMessage,
  ResultOf,
  Session,
  SessionDetail,
  TaskListItem,
  TaskWithSessions,
  TreeBudget,
  TreePreview,
  Workspace,
  Task,
} from '@kandev/contracts';

/** A page of a list route (`GET /workspaces`, `GET /tasks`). */
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}
/** The budget and inbox shapes are the contracts' own (the holds and orchestrator answers, validated there). */
export type { InboxItem, TreeBudget };
export type TreeAction = 'pause' | 'resume' | 'cancel' | 'restore';
export interface TaskListQuery {
  workspace_id: string;
  parent_id?: string;
  roots?: boolean;
  status?: string;
  q?: string;
  limit?: number;
  cursor?: string;
}

/** A refusal in the SPEC §5 error shape: the HTTP status, the error code and the server's words. */
export class ApiRefused extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    readonly serverMessage: string,
    readonly details: unknown,
    readonly method: string,
    readonly path: string,
  ) {
    super(`${method} ${path} → ${status} ${code}: ${serverMessage}`);
  }
}

const query = (params: object) => {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  const s = u.toString();
  return s ? `?${s}` : '';
};

/**
 * The one HTTP client of the gateway API (INTERFACES.md), used by the `kandev` CLI and by the test kit.
 * `call` is the raw layer: JSON in, `{status, body}` out, never throwing on a 4xx/5xx (tests assert on
 * refusals). The named methods are the typed layer: their answers are the contracts' result types, and
 * a refusal throws `ApiRefused` with the server's error code.
 */
export class ApiClient {
  constructor(
    readonly baseUrl: string,
    private readonly token: string | null,
  ) {}

  async call<T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: T }> {
    const res = await fetch(this.baseUrl + path, {
      method,
      headers: {
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
        ...headers,
      },
      ...(body !== undefined ? { body: typeof body === 'string' ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : null) as T };
  }
  get = <T = any>(p: string) => this.call<T>('GET', p);
  post = <T = any>(p: string, b: unknown = {}) => this.call<T>('POST', p, b);
  patch = <T = any>(p: string, b: unknown) => this.call<T>('PATCH', p, b);

  /** A call that must succeed: its body, or `ApiRefused` carrying the server's error code. */
  async ok<T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    const r = await this.call<any>(method, path, body, headers);
    if (r.status >= 300) {
      const err = r.body?.error ?? {};
      throw new ApiRefused(r.status, String(err.code ?? `HTTP_${r.status}`), String(err.message ?? JSON.stringify(r.body)), err.details, method, path);
    }
    return r.body as T;
  }

  /**
   * `POST /tasks/:id/sessions` as a client that follows INTERFACES.md does: with an Idempotency-Key,
   * trying again after a 503 (a launch that outlived a short gateway deadline on a busy machine) or
   * a 409 saying the first attempt is still in progress, until `withinMs`. The key makes every try
   * answer the one session, so a retry never launches a second agent (B-7).
   */
  async startSession<T = Session>(taskId: string, body: unknown, withinMs = 60_000): Promise<T> {
    const key = `start-${taskId}-${Math.random().toString(36).slice(2)}`;
    const path = `/tasks/${taskId}/sessions`;
    for (const end = Date.now() + withinMs; ;) {
      try {
        return await this.ok<T>('POST', path, body, { 'idempotency-key': key });
      } catch (e) {
        const inProgress = e instanceof ApiRefused && e.status === 409 && /in progress/.test(e.serverMessage);
        if (!(e instanceof ApiRefused) || (e.status !== 503 && !inProgress) || Date.now() > end) throw e;
      }
      await new Promise((resolve) => setTimeout(resolve, 250)); // a client's pause before it tries again
    }
  }

  // ---------------------------------------------------------------- typed routes
  workspaces = (params: { limit?: number; cursor?: string } = {}) => this.ok<Page<Workspace>>('GET', `/workspaces${query(params)}`);
  createWorkspace = (name: string) => this.ok<Workspace>('POST', '/workspaces', { name });
  tasks = (params: TaskListQuery) => this.ok<Page<TaskListItem>>('GET', `/tasks${query(params)}`);
  createTask = (body: { workspace_id: string; title: string; parent_id?: string | null; agent?: string | null }) => this.ok<Task>('POST', '/tasks', body);
  task = (id: string) => this.ok<TaskWithSessions>('GET', `/tasks/${id}`);
  stopTask = (id: string, reason?: string) => this.ok<ResultOf<typeof Orch.taskStop>>('POST', `/tasks/${id}/stop`, reason ? { reason } : {});
  session = (id: string) => this.ok<SessionDetail>('GET', `/sessions/${id}`);
  cancelTurn = (sessionId: string, reason?: string) =>
    this.ok<ResultOf<typeof Orch.agentCancel>>('POST', `/sessions/${sessionId}/cancel`, reason ? { reason } : {});
  prompt = (sessionId: string, prompt: string) => this.ok<ResultOf<typeof Orch.sessionPrompt>>('POST', `/sessions/${sessionId}/prompt`, { prompt });
  queue = (taskId: string) => this.ok<QueuedMessage[]>('GET', `/tasks/${taskId}/queue`);
  queuePrompt = (taskId: string, prompt: string) => this.ok<ResultOf<typeof OrchOperatorExtras.queueAdd>>('POST', `/tasks/${taskId}/queue`, { prompt });
  deleteQueued = (taskId: string, messageId: string) => this.ok<QueuedMessage>('DELETE', `/tasks/${taskId}/queue/${messageId}`);
  resumeQueue = (taskId: string) => this.ok<ResultOf<typeof Orch.taskQueueResume>>('POST', `/tasks/${taskId}/queue/resume`);
  agents = () => this.ok<ResultOf<typeof OrchOperatorExtras.agentList>>('GET', '/agents');
  treePreview = (taskId: string) => this.ok<TreePreview>('POST', `/tasks/${taskId}/tree/preview`);
  tree = (action: TreeAction, taskId: string, reason?: string) =>
    this.ok<ResultOf<(typeof OrchTree)[TreeAction]>>('POST', `/tasks/${taskId}/tree/${action}`, reason ? { reason } : {});
  budget = (taskId: string) => this.ok<TreeBudget>('GET', `/tasks/${taskId}/tree/budget`);
  setBudget = (taskId: string, limitCents: number) => this.ok<TreeBudget>('PUT', `/tasks/${taskId}/tree/budget`, { limit_cents: limitCents });
  clearBudget = (taskId: string) => this.ok<null>('DELETE', `/tasks/${taskId}/tree/budget`);
  inbox = (workspaceId: string) => this.ok<Inbox>('GET', `/inbox${query({ workspace_id: workspaceId })}`);
}
