/** The services /readyz pings; the gateway is ready only when each of them answers. */
export const REQUIRED_SERVICES = ['orchestrator', 'lifecycle', 'holds', 'mcp'] as const;
export type RequiredService = (typeof REQUIRED_SERVICES)[number];

export interface ReadinessInput {
  natsConnected: boolean;
  stopping: boolean;
  /** null = answered; else why not. */
  services: Record<RequiredService, string | null>;
  /** What the services that answered report about themselves (lifecycle: `agent_isolation`). */
  details?: Partial<Record<RequiredService, Record<string, string | number | boolean>>>;
}
export interface ReadinessReport {
  ready: boolean;
  body: {
    status: 'ready' | 'not_ready';
    nats: 'ok' | 'down';
    stopping: boolean;
    services: Record<string, string>;
    missing: string[];
    details?: Record<string, Record<string, string | number | boolean>>;
  };
}

export function readinessReport(input: ReadinessInput): ReadinessReport {
  const missing = REQUIRED_SERVICES.filter((s) => input.services[s] !== null);
  const services = Object.fromEntries(REQUIRED_SERVICES.map((s) => [s, input.services[s] ?? 'ok']));
  const ready = input.natsConnected && !input.stopping && missing.length === 0;
  const details = Object.fromEntries(Object.entries(input.details ?? {}).filter(([, d]) => d && Object.keys(d).length > 0)) as Record<
    string,
    Record<string, string | number | boolean>
  >;
  return {
    ready,
    body: {
      status: ready ? 'ready' : 'not_ready',
      nats: input.natsConnected ? 'ok' : 'down',
      stopping: input.stopping,
      services,
      missing: [...missing],
      ...(Object.keys(details).length > 0 ? { details } : {}),
    },
  };
}
