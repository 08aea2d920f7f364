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
