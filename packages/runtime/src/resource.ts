import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { defaultResource, resourceFromAttributes, type Resource } from '@opentelemetry/resources';
// The stable entry only: agentctl loads this module when it exports, and the incubating entry would add ~15 ms to its start.
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';

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
 * The resource every exported span carries. Precedence, lowest first: the SDK's defaults
 * (telemetry.sdk.*), this process's service.name / service.version / service.instance.id,
 * OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME (the last two as the SDK environment specification
 * orders them; with `ownIdentity` the service.* attributes stay this process's). Kubernetes
 * attributes (k8s.pod.name, k8s.namespace.name, ...) are not set here: the collector's
 * k8sattributes processor adds them from the pod's address (deploy/observability).
 */
export function buildResource(opts: ResourceOptions): Resource {
  const own: Record<string, string> = { [ATTR_SERVICE_NAME]: opts.serviceName };
  if (opts.serviceVersion) own[ATTR_SERVICE_VERSION] = opts.serviceVersion;
  if (opts.instanceId) own[ATTR_SERVICE_INSTANCE_ID] = opts.instanceId;
  const fromEnv = parseResourceAttributes(opts.env?.OTEL_RESOURCE_ATTRIBUTES);
  const serviceName = opts.env?.OTEL_SERVICE_NAME?.trim();
  if (serviceName) fromEnv[ATTR_SERVICE_NAME] = serviceName;
  const attributes = opts.ownIdentity ? { ...fromEnv, ...own } : { ...own, ...fromEnv };
  return defaultResource().merge(resourceFromAttributes(attributes));
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
