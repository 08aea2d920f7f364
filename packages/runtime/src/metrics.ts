import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** One registry per process; every service serves it on /metrics. */
export const registry = new Registry();
collectDefaultMetrics({ register: registry });

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
};
