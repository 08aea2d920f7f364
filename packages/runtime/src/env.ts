import { z } from 'zod';

/** Variables every service reads. Each service extends this with its own. */
export const BaseEnv = z.object({
  NATS_URL: z.string().default('nats://127.0.0.1:4222'),
  NATS_USER: z.string().optional(),
  NATS_PASS: z.string().optional(),
  /**
   * Bus identity (identity.ts, ADR 0055): this service's Ed25519 private key and every service's
   * public key. Read by busIdentityFromEnv; listed here so a deployment that sets them is checked.
   */
  KANDEV_BUS_KEY: z.string().optional(),
  KANDEV_BUS_PUBLIC_KEYS: z.string().optional(),
  DATABASE_URL: z.string().optional(),
  // The token keys (KANDEV_JWT_SECRET, KANDEV_OPERATOR_JWT_SECRET, KANDEV_AGENT_JWT_SECRET) are not
  // here: each service names the keys it holds (ServiceDefinition.keys) and keys.ts checks them.
  INSTANCE_ID: z
    .string()
    .regex(/^[A-Za-z0-9_-]+$/)
    .optional(),
  /** Port of the /healthz, /readyz and /metrics server; 0 = any free port. */
  HEALTH_PORT: z.coerce.number().int().min(0).max(65535).default(0),
  HEALTH_HOST: z.string().default('127.0.0.1'),
  LOG_LEVEL: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
  SHUTDOWN_TIMEOUT_MS: z.coerce.number().int().positive().default(10_000),
  REQUEST_TIMEOUT_MS: z.coerce.number().int().positive().default(5_000),
  /**
   * Replicas of the JetStream storage this system creates (event stream, registry bucket): 1 on one
   * nats-server (npm start), 3 on the 3-node cluster in deploy/. Used when creating them only: an
   * existing stream keeps what it has (an operator may have changed it), with a warning on mismatch.
   */
  KANDEV_JS_REPLICAS: z.coerce.number().int().min(1).max(5).default(1),
  // The OpenTelemetry SDK's own variables (tracing.ts exportsSpans decides whether to load the SDK,
  // which then reads every OTEL_* variable itself: protocol, headers, timeouts, sampler, detectors).
  OTEL_SDK_DISABLED: z.string().optional(),
  OTEL_TRACES_EXPORTER: z.string().optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: z.string().optional(),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: z.string().optional(),
  OTEL_SERVICE_NAME: z.string().optional(),
  /** Resource attributes of every exported span (the OTel SDK environment specification's format). */
  OTEL_RESOURCE_ATTRIBUTES: z.string().optional(),
});
export type BaseEnv = z.infer<typeof BaseEnv>;

const SECRET_KEYS = /SECRET|PASS|TOKEN|KEY/i;

/** Parse once at start-up; fail fast with every problem listed, never echoing a secret's value. */
export function parseEnv<S extends z.ZodType>(schema: S, source: NodeJS.ProcessEnv = process.env): z.infer<S> {
  const parsed = schema.safeParse(source);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((i) => {
    const key = i.path.join('.');
    // The rule is safe to show; the value never is (these zod messages do not include it).
    if (!SECRET_KEYS.test(key) || i.code === 'invalid_type') return `${key}: ${i.message}`;
    return `${key}: ${i.message} (value hidden)`;
  });
  throw new Error(`invalid environment:\n  ${problems.join('\n  ')}`);
}
