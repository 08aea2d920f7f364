import { trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { defaultResource, hostDetector, processDetector, resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
// The stable entry only: the incubating entry would add ~15 ms to a start.
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import { parseResourceAttributes, type ResourceOptions } from './resource.js';
import type { ProcessTracerProvider, TracingOptions } from './tracing.js';

/**
 * The OpenTelemetry SDK (`@opentelemetry/sdk-node`), configured by its own environment variables:
 * OTEL_TRACES_EXPORTER (otlp, console, zipkin), OTEL_EXPORTER_OTLP_{,TRACES_}{ENDPOINT,PROTOCOL,
 * HEADERS,TIMEOUT} (http/protobuf, http/json or grpc), OTEL_TRACES_SAMPLER, OTEL_BSP_*,
 * OTEL_NODE_RESOURCE_DETECTORS, OTEL_PROPAGATORS is not read (W3C trace context is what the hops
 * carry). tracing.ts loads this module only when spans are exported (exportsSpans), so a process
 * that exports nothing never imports the SDK. Traces only: metrics are Prometheus's (prom-client,
 * scraped) and logs are JSON lines on stdout, so the SDK's metric readers and log processors are
 * set to none rather than left to their OTLP defaults.
 */
export function recordingProvider(opts: TracingOptions): ProcessTracerProvider {
  const sdk = new NodeSDK({
    resource: buildResource(opts),
    // agentctl's environment is its lifecycle's: the env detector would give it the lifecycle's
    // service.* attributes, which buildResource already leaves out (ownIdentity).
    ...(opts.ownIdentity ? { resourceDetectors: [processDetector, hostDetector] } : {}),
    ...(opts.exporter ? { spanProcessors: [new SimpleSpanProcessor(opts.exporter)] } : {}),
    textMapPropagator: new W3CTraceContextPropagator(),
    metricReaders: [],
    logRecordProcessors: [],
  });
  sdk.start();
  return {
    getTracer: (name, version, options) => trace.getTracerProvider().getTracer(name, version, options),
    shutdown: () => sdk.shutdown(),
  };
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
