import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import { BatchSpanProcessor, SimpleSpanProcessor, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
// The stable entry only: the incubating entry would add ~15 ms to a start.
import { ATTR_SERVICE_INSTANCE_ID, ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION } from '@opentelemetry/semantic-conventions';
import { parseResourceAttributes, type ResourceOptions } from './resource.js';
import type { TracingOptions } from './tracing.js';

/**
 * The OpenTelemetry SDK: a provider that records spans and exports them. tracing.ts loads this
 * module only when there is somewhere to export, so a process that exports nothing never imports
 * the SDK.
 */
export function recordingProvider(opts: TracingOptions): NodeTracerProvider {
  const spanProcessors: SpanProcessor[] = [];
  if (opts.exporter) spanProcessors.push(new SimpleSpanProcessor(opts.exporter));
  if (opts.otlpEndpoint) {
    const url = opts.otlpEndpoint.replace(/\/$/, '') + '/v1/traces';
    spanProcessors.push(new BatchSpanProcessor(new OTLPTraceExporter({ url })));
  }
  const provider = new NodeTracerProvider({ resource: buildResource(opts), spanProcessors });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  return provider;
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
