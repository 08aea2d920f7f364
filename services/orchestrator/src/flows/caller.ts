import { forbidden, unauthorized, type McpMode } from '@kandev/contracts';
import { agentTokenVerifier, type AgentClaims } from '@kandev/runtime';
import type { OrchRuntime } from './context.js';

/**
 * The orchestrator does not take `caller_task_id` on trust, nor rely on NATS permissions alone:
 * every kandev.orch.mcp.> request carries the calling agent's own token, forwarded by the mcp
 * service, and it is verified here before anything else: signature, audience (kandev-mcp),
 * expiry, that it names the very task the request claims to come from, and that its mode grants
 * the tool. A message published on the subject by anyone without that token is refused.
 */
/**
 * A verified token is remembered until its expiry, as the mcp service does (an HMAC check through
 * WebCrypto costs about 0.1 ms per request, docs/fast-paths.md). One cache per service runtime.
 */
const verifiers = new WeakMap<OrchRuntime, (token: string) => Promise<AgentClaims>>();
function verifierOf(rt: OrchRuntime) {
  let verify = verifiers.get(rt);
  if (!verify) verifiers.set(rt, (verify = agentTokenVerifier(rt.key('agent'))));
  return verify;
}

export async function verifyMcpCaller(
  rt: OrchRuntime,
  req: { caller_task_id: string; agent_token?: string | undefined },
  modes: readonly McpMode[],
): Promise<AgentClaims> {
  if (!req.agent_token) throw unauthorized('missing agent token');
  const claims = await verifierOf(rt)(req.agent_token);
  if (claims.task_id !== req.caller_task_id) throw unauthorized('agent token does not belong to the calling task');
  if (!modes.includes(claims.mode)) throw forbidden(`not available in ${claims.mode} mode`);
  return claims;
}
