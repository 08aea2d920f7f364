/**
 * Tracing for agentctl: spans are always created against the OTel API (W3C context from the
 * lifecycle's HTTP calls is honoured), and exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set.
 * The SDK is loaded only then, so an agent launch does not pay for it otherwise. With it, one
 * trace runs from an MCP stop to the signal agentctl sends the agent.
 */
export async function startTracing(executionId: string | undefined): Promise<() => Promise<void>> {
  const endpoint = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint) return async () => undefined;
  const [{ initTracing, shutdownTracing }, { packageVersion }] = await Promise.all([import('@kandev/runtime/tracing'), import('@kandev/runtime/resource')]);
  // The environment is the lifecycle's (it spawned this process): its OTEL_RESOURCE_ATTRIBUTES
  // (deployment, namespace) hold here too, its service name and instance do not (ownIdentity).
  await initTracing({
    serviceName: 'kandev-agentctl',
    serviceVersion: packageVersion(import.meta.url),
    instanceId: executionId,
    env: { OTEL_RESOURCE_ATTRIBUTES: process.env.OTEL_RESOURCE_ATTRIBUTES },
    ownIdentity: true,
    otlpEndpoint: endpoint,
  });
  return shutdownTracing;
}
