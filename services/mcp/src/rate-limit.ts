import { rateWindow } from '@kandev/contracts';
import { createHash } from 'node:crypto';
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';

/** What a request over the limit is told: how long until the token's window has room again. */
export interface RateRefusal {
  retryAfterS: number;
  limit: number;
  windowMs: number;
}

/**
 * MCP requests per agent token (KANDEV_AGENT_RATE per second, KANDEV_AGENT_BURST at once),
 * counted per replica with the allowance split over MCP_REPLICAS (ADR 0065). Keyed by the token's
 * SHA-256, so tokens never sit in memory as keys. null = no limit (rate 0).
 */
export function agentRateLimiter(opts: { rate: number; burst: number; replicas: number }): ((token: string) => Promise<RateRefusal | null>) | null {
  const window = rateWindow(opts);
  if (!window) return null;
  const limiter = new RateLimiterMemory({ points: window.points, duration: window.windowMs / 1000, keyPrefix: 'mcp' });
  return async (token) => {
    const key = createHash('sha256').update(token).digest('base64url');
    try {
      await limiter.consume(key);
      return null;
    } catch (e) {
      if (!(e instanceof RateLimiterRes)) throw e;
      return { retryAfterS: Math.max(1, Math.ceil(e.msBeforeNext / 1000)), limit: window.points, windowMs: window.windowMs };
    }
  };
}
