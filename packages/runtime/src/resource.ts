import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The variables of the OTel SDK environment specification that describe the resource. */
export interface ResourceEnv {
  /** `key1=value1,key2=value2`, values percent-encoded (W3C Baggage octets). */
  OTEL_RESOURCE_ATTRIBUTES?: string | undefined;
  /** Wins over a `service.name` in OTEL_RESOURCE_ATTRIBUTES. */
  OTEL_SERVICE_NAME?: string | undefined;
}

/** The variables of the OTel SDK environment specification that say whether, and where, spans are exported. */
export interface TracingEnv extends ResourceEnv {
  /** `true` turns the SDK off: nothing is recorded or exported (trace context still propagates). */
  OTEL_SDK_DISABLED?: string | undefined;
  /** Comma-separated exporters (`otlp`, `console`, `zipkin`, `none`). */
  OTEL_TRACES_EXPORTER?: string | undefined;
  OTEL_EXPORTER_OTLP_ENDPOINT?: string | undefined;
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?: string | undefined;
}

/**
 * Whether this process records spans and exports them, as the OTel SDK environment specification
 * reads its variables: not when OTEL_SDK_DISABLED is true; otherwise when OTEL_TRACES_EXPORTER names
 * an exporter other than `none` alone, or, with it unset, when an OTLP endpoint is configured
 * (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). The one departure from the
 * specification: with nothing configured at all, the specification's default is the OTLP exporter to
 * localhost:4318; here it is no export (ADR 0063): a recorded span costs the hot paths CPU, and a
 * process with no collector would send spans nowhere.
 */
export function exportsSpans(env: TracingEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((e) => e.trim().toLowerCase())
    .filter((e) => e !== '' && e !== 'null');
  // The SDK: `none` alone turns tracing off; `none` beside others is ignored.
  if (exporters.length > 0) return !(exporters.length === 1 && exporters[0] === 'none');
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim());
}

export interface ResourceOptions {
  /** service.name when neither variable names one (`kandev-<service>`). */
  serviceName: string;
  /** service.version: the version of the service's package. */
  serviceVersion?: string | undefined;
  /** service.instance.id: the process's INSTANCE_ID (a pod name on Kubernetes). */
  instanceId?: string | undefined;
  env?: ResourceEnv;
  /**
   * The service.* attributes are this process's own, whatever the environment says: agentctl
   * inherits the lifecycle's environment, whose service name and instance are not its own.
   */
  ownIdentity?: boolean;
}

/**
 * OTEL_RESOURCE_ATTRIBUTES as the SDK environment specification reads it: comma-separated
 * `key=value` pairs, each value percent-decoded; a pair without `=`, with an empty key, or whose
 * value does not decode is skipped (the specification: discard what is malformed, keep the rest).
 */
export function parseResourceAttributes(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!raw) return out;
  for (const pair of raw.split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) continue;
    const key = pair.slice(0, eq).trim();
    if (!key) continue;
    try {
      out[key] = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      continue; // not percent-decodable: skipped, as the specification asks
    }
  }
  return out;
}

/**
 * `version` of the nearest package.json at or above `from` (a module's `import.meta.url`): the
 * service.version of a service is its package's version, in the image as in a checkout.
 */
export function packageVersion(from: string): string | undefined {
  let dir = dirname(fileURLToPath(from));
  for (;;) {
    try {
      const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version?: unknown };
      return typeof pkg.version === 'string' ? pkg.version : undefined;
    } catch {
      // no (readable) package.json here: look one directory up
    }
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}
