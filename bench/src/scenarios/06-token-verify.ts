import { createHmac } from 'node:crypto';
import { agentTokenVerifier, operatorTokenVerifier, signAgentToken, signOperatorToken } from '@kandev/runtime';
import type { Scenario } from '../scenario.js';
import { measure } from '../stats.js';

const SECRET = 'bench-token-secret-0123456789abcdef';

/**
 * What checking a bearer token costs: the gateway verifies an operator's token, and the mcp service
 * and the orchestrator an agent's, the first time they see it, and answer it from memory after that
 * until it expires. Floor: one HMAC-SHA256 of the same signing input with node:crypto.
 */
const scenario: Scenario = {
  name: 'bearer token verification',
  async run(ctx) {
    const n = ctx.iterations + ctx.warmup;
    const operator = await Promise.all(Array.from({ length: n }, (_, i) => signOperatorToken(SECRET, { sub: `op-${i}`, workspaces: ['*'] })));
    const agent = await Promise.all(
      Array.from({ length: n }, (_, i) => signAgentToken(SECRET, { task_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}` })),
    );
    const hmac = await measure(async (i) => {
      const t = operator[i]!;
      createHmac('sha256', SECRET)
        .update(t.slice(0, t.lastIndexOf('.')))
        .digest('base64url');
    }, ctx);
    // Fresh verifiers: every token is seen for the first time (an operator's first request, a new agent's first call).
    const verifyOperator = operatorTokenVerifier(SECRET);
    const operatorFirst = await measure((i) => verifyOperator(operator[i]!), ctx);
    const operatorAgain = await measure((i) => verifyOperator(operator[i]!), ctx);
    const verifyAgent = agentTokenVerifier(SECRET);
    const agentFirst = await measure((i) => verifyAgent(agent[i]!), ctx);
    const agentAgain = await measure((i) => verifyAgent(agent[i]!), ctx);
    return [
      { id: 'token.hmac.bare', label: "bare HMAC-SHA256 of a token's signing input (node:crypto)", stats: hmac },
      {
        id: 'token.operator.verify',
        label: 'operator token verified the first time (gateway): signature, audience, expiry, claims',
        stats: operatorFirst,
        baseline: 'token.hmac.bare',
      },
      {
        id: 'token.operator.again',
        label: "the same operator tokens again, answered from the verifier's memory",
        stats: operatorAgain,
        baseline: 'token.hmac.bare',
      },
      { id: 'token.agent.first', label: 'agent token verified the first time (mcp service and orchestrator)', stats: agentFirst, baseline: 'token.hmac.bare' },
      { id: 'token.agent.again', label: "the same agent tokens again, answered from the verifier's memory", stats: agentAgain, baseline: 'token.hmac.bare' },
    ];
  },
};
export default scenario;
