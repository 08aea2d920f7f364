import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** One registry per process; every service serves it on /metrics. */
export const registry = new Registry();
collectDefaultMetrics({ register: registry });

/** How a gauge read at scrape time gets its value; set by the service that owns the number. */
type ScrapeReader = () => Promise<number> | number;
const scrapeReaders = new Map<string, ScrapeReader>();

/** A gauge whose value is read when Prometheus scrapes (a count in a table), not kept up to date by a timer. */
function scrapedGauge(name: string, help: string): Gauge {
  return new Gauge({
    name,
    help,
    registers: [registry],
    async collect() {
      const read = scrapeReaders.get(name);
      if (read) this.set(await read());
    },
  });
}

/** Give a scraped gauge its reader (the service owning the data calls this once at start). */
export function readOnScrape(
  name:
    | 'kandev_outbox_oldest_age_seconds'
    | 'kandev_wakeup_backlog'
    | 'kandev_wakeup_oldest_age_seconds'
    | 'kandev_live_executions'
    | 'kandev_launch_queue_depth'
    | 'kandev_pending_question_bundles'
    | 'kandev_pending_question_oldest_age_seconds'
    | 'kandev_pending_permission_requests'
    | 'kandev_pending_permission_oldest_age_seconds',
  read: ScrapeReader,
): void {
  scrapeReaders.set(name, read);
}

export const metrics = {
  requestDuration: new Histogram({
    name: 'kandev_request_duration_seconds',
    help: 'NATS request handling time by endpoint and result code',
    labelNames: ['endpoint', 'code'],
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  }),
  eventsHandled: new Counter({
    name: 'kandev_events_handled_total',
    help: 'JetStream events handled by consumer and outcome',
    labelNames: ['consumer', 'outcome'],
    registers: [registry],
  }),
  eventsRedelivered: new Counter({
    name: 'kandev_events_redelivered_total',
    help: 'JetStream events delivered again to a consumer (an earlier delivery was not acknowledged in time or failed)',
    labelNames: ['consumer'],
    registers: [registry],
  }),
  /** Read at scrape time in a service with an outbox (`Outbox.exportAge`). */
  outboxOldestAge: scrapedGauge(
    'kandev_outbox_oldest_age_seconds',
    "Age of the oldest event committed to this service's outbox and not yet published (0 when none)",
  ),
  /**
   * OpenTelemetry's `http.server.request.duration` as Prometheus names it (dots become underscores,
   * the unit a suffix), so dashboards written for the semantic conventions read it unchanged. The
   * buckets are the conventions' advice for this instrument.
   */
  httpServerRequestDuration: new Histogram({
    name: 'http_server_request_duration_seconds',
    help: 'Duration of HTTP server requests by route template, method and status code (gateway API, mcp /mcp)',
    labelNames: ['http_route', 'http_request_method', 'http_response_status_code'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10],
    registers: [registry],
  }),
  wsActionDuration: new Histogram({
    name: 'kandev_ws_action_duration_seconds',
    help: '/ws action handling time by action and result code',
    labelNames: ['action', 'code'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
    registers: [registry],
  }),
  mcpToolDuration: new Histogram({
    name: 'kandev_mcp_tool_duration_seconds',
    help: 'MCP tool call handling time by tool and result code',
    labelNames: ['tool', 'code'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10, 60],
    registers: [registry],
  }),
  /** holds: set at scrape time from the wakeup queue. */
  wakeupBacklog: scrapedGauge('kandev_wakeup_backlog', 'Wakeups queued and due, not yet claimed'),
  wakeupOldestAge: scrapedGauge('kandev_wakeup_oldest_age_seconds', 'How long the oldest due wakeup has waited (0 when none)'),
  /** lifecycle. */
  liveExecutions: scrapedGauge('kandev_live_executions', 'Executions (agentctl + agent) this lifecycle instance runs'),
  launchQueueDepth: scrapedGauge('kandev_launch_queue_depth', "Launches waiting in this lifecycle instance's queue"),
  launchWait: new Histogram({
    name: 'kandev_launch_wait_seconds',
    help: 'Time a launch waited in the queue before it started',
    buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [registry],
  }),
  launchRefusals: new Counter({ name: 'kandev_launch_refusals_total', help: 'Launches refused for capacity (503 + Retry-After)', registers: [registry] }),
  teardownDuration: new Histogram({
    name: 'kandev_teardown_duration_seconds',
    help: 'From a teardown starting in lifecycle (its stop accepted) until every process of the execution is gone, by how it ended (graceful, exited, killed)',
    labelNames: ['how'],
    buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30],
    registers: [registry],
  }),
  teardownEscalations: new Counter({
    name: 'kandev_teardown_escalations_total',
    help: 'Agents that outlived the SIGTERM grace and were SIGKILLed',
    registers: [registry],
  }),
  registryLapses: new Counter({
    name: 'kandev_registry_lapses_total',
    help: 'Registry refreshes that came after the TTL (the instance stalled; entries may have lapsed)',
    registers: [registry],
  }),
  /** orchestrator. */
  holdMembers: new Histogram({
    name: 'kandev_hold_members',
    help: 'Tasks in a tree hold when it is created, by mode',
    labelNames: ['mode'],
    buckets: [1, 5, 10, 50, 100, 500, 1000, 5000],
    registers: [registry],
  }),
};

/** HTTP methods the conventions name; anything else is `_OTHER` (a client can send any token). */
const HTTP_METHODS = new Set(['CONNECT', 'DELETE', 'GET', 'HEAD', 'OPTIONS', 'PATCH', 'POST', 'PUT', 'TRACE']);

/** One HTTP request served (gateway's API routes, mcp's `/mcp`): the route is a template, never a raw path. */
export function observeHttpRequest(route: string, method: string | undefined, status: number, seconds: number): void {
  const m = method?.toUpperCase() ?? '_OTHER';
  metrics.httpServerRequestDuration.observe(
    { http_route: route, http_request_method: HTTP_METHODS.has(m) ? m : '_OTHER', http_response_status_code: String(status) },
    seconds,
  );
}

/**
 * A label whose values come from outside kandev (an agent's name, a model's): the first `max`
 * distinct values this process sees keep their name, every later one is `other`, so a runaway
 * source cannot grow the series without bound (each process holds at most `max + 1`).
 */
export function boundedLabel(max: number): (value: string | null | undefined) => string {
  const seen = new Set<string>();
  return (raw) => {
    if (!raw) return 'none';
    // A name, not a payload: long values are cut to what a dashboard legend can show.
    const value = raw.slice(0, 100);
    if (seen.has(value)) return value;
    if (seen.size >= max) return 'other';
    seen.add(value);
    return value;
  };
}

/** Who stopped a session or cancelled a turn: the operator's API, a parent agent's MCP tool, a tree hold, or a budget's pause. */
export type StopSource = 'operator' | 'parent_agent' | 'tree_hold' | 'budget';

/** Why a session ended FAILED: its launch failed or was lost, or its execution ended without a stop. */
export type SessionFailure = 'launch_failed' | 'launch_lost' | 'execution_exited' | 'execution_lost' | 'execution_killed' | 'execution_other';

const agentLabel = boundedLabel(32);
const modelLabel = boundedLabel(32);

const productMetrics = {
  sessionsStarted: new Counter({
    name: 'kandev_sessions_started_total',
    help: 'Sessions whose launch was accepted, by agent',
    labelNames: ['agent'],
    registers: [registry],
  }),
  sessionsFailed: new Counter({
    name: 'kandev_sessions_failed_total',
    help: 'Sessions that ended FAILED, by agent and reason',
    labelNames: ['agent', 'reason'],
    registers: [registry],
  }),
  sessionStops: new Counter({
    name: 'kandev_session_stops_total',
    help: 'Sessions stopped (accepted stop decisions), by who stopped them',
    labelNames: ['source'],
    registers: [registry],
  }),
  turnCancels: new Counter({
    name: 'kandev_turn_cancels_total',
    help: 'Turns cancelled (the session lives on), by who cancelled them',
    labelNames: ['source'],
    registers: [registry],
  }),
  turnDuration: new Histogram({
    name: 'kandev_turn_duration_seconds',
    help: 'From a turn being handed to the agent until it ended, by agent',
    labelNames: ['agent'],
    buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200],
    registers: [registry],
  }),
  tokens: new Counter({
    name: 'kandev_tokens_total',
    help: 'Tokens reported by cost events, by model and kind (input, cached_input, output)',
    labelNames: ['model', 'kind'],
    registers: [registry],
  }),
  costCents: new Counter({
    name: 'kandev_cost_cents_total',
    help: 'Cost reported by cost events, in US cents, by model',
    labelNames: ['model'],
    registers: [registry],
  }),
  pendingQuestionBundles: scrapedGauge(
    'kandev_pending_question_bundles',
    'Question bundles waiting for an answer (the whole deployment, read from the database)',
  ),
  pendingQuestionOldestAge: scrapedGauge(
    'kandev_pending_question_oldest_age_seconds',
    'How long the oldest unanswered question bundle has waited (the whole deployment; 0 when none)',
  ),
  pendingPermissionRequests: scrapedGauge('kandev_pending_permission_requests', 'Agent permission requests waiting for a decision (the whole deployment)'),
  pendingPermissionOldestAge: scrapedGauge(
    'kandev_pending_permission_oldest_age_seconds',
    'How long the oldest undecided permission request has waited (the whole deployment; 0 when none)',
  ),
  wsConnections: new Gauge({ name: 'kandev_ws_connections', help: '/ws connections open on this gateway instance', registers: [registry] }),
  mcpRequestsInFlight: new Gauge({
    name: 'kandev_mcp_requests_in_flight',
    help: 'HTTP requests to /mcp being served by this mcp instance (a tool call holds its request open)',
    registers: [registry],
  }),
  mcpToolCallsInFlight: new Gauge({ name: 'kandev_mcp_tool_calls_in_flight', help: 'MCP tool calls running on this mcp instance', registers: [registry] }),
};

/**
 * The product events services report, one function per event, called where the event happens and
 * only once it is durable (after the transaction that decided it commits), so a retried
 * transaction is not counted twice. Labels are bounded: agents and models through `boundedLabel`,
 * sources and reasons from fixed sets; no task, session or workspace id is ever a label.
 */
export const product = {
  sessionStarted: (agent: string) => productMetrics.sessionsStarted.inc({ agent: agentLabel(agent) }),
  sessionFailed: (agent: string | null, reason: SessionFailure) => productMetrics.sessionsFailed.inc({ agent: agentLabel(agent), reason }),
  sessionsStopped: (source: StopSource, sessions: number) => {
    if (sessions > 0) productMetrics.sessionStops.inc({ source }, sessions);
  },
  turnCancelled: (source: StopSource) => productMetrics.turnCancels.inc({ source }),
  turnEnded: (agent: string | null, seconds: number) => productMetrics.turnDuration.observe({ agent: agentLabel(agent) }, Math.max(0, seconds)),
  costRecorded: (e: { model: string | null; tokens_in: number; tokens_cached_in: number; tokens_out: number; cost_cents: number }) => {
    const model = modelLabel(e.model);
    productMetrics.tokens.inc({ model, kind: 'input' }, e.tokens_in);
    productMetrics.tokens.inc({ model, kind: 'cached_input' }, e.tokens_cached_in);
    productMetrics.tokens.inc({ model, kind: 'output' }, e.tokens_out);
    productMetrics.costCents.inc({ model }, e.cost_cents);
  },
  /** A /ws connection opened; call the returned function once when it closes. */
  wsConnectionOpened: () => inFlight(productMetrics.wsConnections),
  /** An HTTP request to /mcp started; call the returned function once when it ends. */
  mcpRequestStarted: () => inFlight(productMetrics.mcpRequestsInFlight),
  /** A tool call started; call the returned function once when it ends. */
  mcpToolCallStarted: () => inFlight(productMetrics.mcpToolCallsInFlight),
};

/** A per-instance gauge of things in progress (summed across replicas, it is the deployment's). */
function inFlight(g: Gauge): () => void {
  g.inc();
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    g.dec();
  };
}
