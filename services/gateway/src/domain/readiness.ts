/** The services /readyz pings; the gateway is ready only when each of them answers. */
export const REQUIRED_SERVICES = ['orchestrator', 'lifecycle', 'holds', 'mcp'] as const;
export type RequiredService = (typeof REQUIRED_SERVICES)[number];

export interface ReadinessInput {
  natsConnected: boolean;
  stopping: boolean;
  /** null = answered; else why not. */
  services: Record<RequiredService, string | null>;
}
export interface ReadinessReport {
  ready: boolean;
  body: { status: 'ready' | 'not_ready'; nats: 'ok' | 'down'; stopping: boolean; services: Record<string, string>; missing: string[] };
}

export function readinessReport(input: ReadinessInput): ReadinessReport {
  const missing = REQUIRED_SERVICES.filter((s) => input.services[s] !== null);
  const services = Object.fromEntries(REQUIRED_SERVICES.map((s) => [s, input.services[s] ?? 'ok']));
  const ready = input.natsConnected && !input.stopping && missing.length === 0;
  return { ready, body: { status: ready ? 'ready' : 'not_ready', nats: input.natsConnected ? 'ok' : 'down', stopping: input.stopping, services, missing: [...missing] } };
}
