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
    'kandev_outbox_oldest_age_seconds' | 'kandev_wakeup_backlog' | 'kandev_wakeup_oldest_age_seconds' | 'kandev_live_executions' | 'kandev_launch_queue_depth',
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
  httpRequestDuration: new Histogram({
    name: 'kandev_http_request_duration_seconds',
    help: 'HTTP request handling time by route template, method and status code (gateway, mcp)',
    labelNames: ['route', 'method', 'code'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
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
