/** Every subject, stream and bucket name lives here; services never spell one by hand. */
export const SUBJECT_PREFIX = 'kandev';

export const Streams = {
  events: { name: 'KANDEV_EVENTS', subjects: ['kandev.evt.>'] },
} as const;

export const Buckets = {
  /** One key per execution, value = Execution, refreshed by its owner instance (TTL = liveness). */
  executions: 'KANDEV_EXECUTIONS',
} as const;

export const eventSubject = (type: string) => `${SUBJECT_PREFIX}.evt.${type}`;

/** Queue groups: N replicas of a service share one group. */
export const QueueGroups = {
  orchestrator: 'orchestrator',
  lifecycle: 'lifecycle',
  holds: 'holds',
  mcp: 'mcp',
  gateway: 'gateway',
} as const;

/** Service names as registered with @nats-io/services ($SRV.PING.<name>). */
export const ServiceNames = ['orchestrator', 'lifecycle', 'holds', 'mcp', 'gateway'] as const;
export type ServiceName = (typeof ServiceNames)[number];
