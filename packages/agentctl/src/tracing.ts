/**
 * Tracing for agentctl: spans are always created against the OTel API (W3C context from the
 * lifecycle's HTTP calls is honoured), and exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set.
 * The SDK is loaded only then, so an agent launch does not pay for it otherwise. With it, one
 * trace runs from an MCP stop to the signal agentctl sends the agent.
 */
export async function startTracing(): Promise<() => Promise<void>> {
  const endpoint = process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
  if (!endpoint) return async () => undefined;
  const { initTracing, shutdownTracing } = await import('@kandev/runtime/tracing');
  initTracing({ serviceName: 'kandev-agentctl', otlpEndpoint: endpoint });
  return shutdownTracing;
}
