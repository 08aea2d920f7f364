/**
 * Tracing for agentctl: spans are always created against the OTel API (W3C context from the
 * lifecycle's HTTP calls is honoured), and exported only when the OTEL_* variables say so (exportsSpans).
 * The SDK is loaded only then, so an agent launch does not pay for it otherwise. With it, one
 * trace runs from an MCP stop to the signal agentctl sends the agent.
 */
export async function startTracing(executionId: string | undefined): Promise<() => Promise<void>> {
  const env = {
    OTEL_SDK_DISABLED: process.env.OTEL_SDK_DISABLED,
    OTEL_TRACES_EXPORTER: process.env.OTEL_TRACES_EXPORTER,
    OTEL_EXPORTER_OTLP_ENDPOINT: process.env.OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: process.env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    // The environment is the lifecycle's (it spawned this process): its OTEL_RESOURCE_ATTRIBUTES
    // (deployment, namespace) hold here too, its service name and instance do not (ownIdentity).
    OTEL_RESOURCE_ATTRIBUTES: process.env.OTEL_RESOURCE_ATTRIBUTES,
  };
  const { exportsSpans, packageVersion } = await import('@kandev/runtime/resource');
  if (!exportsSpans(env)) return async () => undefined;
  const { initTracing, shutdownTracing } = await import('@kandev/runtime/tracing');
  await initTracing({
    serviceName: 'kandev-agentctl',
    serviceVersion: packageVersion(import.meta.url),
    instanceId: executionId,
    env,
    ownIdentity: true,
  });
  return shutdownTracing;
}
