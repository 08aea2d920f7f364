import {
  AgentctlCancelResponse,
  AgentctlErrorResponse,
  AgentctlPaths,
  AgentctlPromptResponse,
  AgentctlStopResponse,
} from '@kandev/contracts';
import { SpanKind, inSpan, traceHeaders } from '@kandev/runtime';
import type { z } from 'zod';

/** agentctl answered with an error status (409, 504, ...). */
export class AgentctlHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
  ) {
    super(message);
    this.name = 'AgentctlHttpError';
  }
}

/** agentctl did not answer at all (refused, reset, or timed out). */
export class AgentctlUnreachable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AgentctlUnreachable';
  }
}

/**
 * The loopback HTTP API of one agentctl. Every call carries W3C trace context and a
 * deadline; bodies are validated against the agentctl contract on the way back.
 */
export class AgentctlClient {
  constructor(readonly baseUrl: string) {}

  prompt(prompt: string, turnId: string, context?: string, timeoutMs = 10_000) {
    return this.post(AgentctlPaths.prompt, { prompt, turn_id: turnId, ...(context ? { context } : {}) }, AgentctlPromptResponse, timeoutMs);
  }

  cancel(turnId: string | undefined, timeoutMs: number) {
    return this.post(AgentctlPaths.cancel, turnId ? { turn_id: turnId } : {}, AgentctlCancelResponse, timeoutMs);
  }

  stop(graceMs: number, timeoutMs: number) {
    return this.post(AgentctlPaths.stop, { grace_ms: graceMs }, AgentctlStopResponse, timeoutMs);
  }

  private post<S extends z.ZodType>(path: string, body: unknown, schema: S, timeoutMs: number): Promise<z.infer<S>> {
    return inSpan(
      `POST ${path}`,
      { kind: SpanKind.CLIENT, attributes: { 'http.request.method': 'POST', 'url.path': path, 'server.address': this.baseUrl } },
      async (span) => {
        let res: Response;
        try {
          res = await fetch(new URL(path, this.baseUrl), {
            method: 'POST',
            headers: { 'content-type': 'application/json', ...traceHeaders() },
            body: JSON.stringify(body),
            signal: AbortSignal.timeout(timeoutMs),
          });
        } catch (e) {
          throw new AgentctlUnreachable(`agentctl ${path} failed: ${(e as Error).message}`, { cause: e });
        }
        span.setAttribute('http.response.status_code', res.status);
        let json: unknown;
        try {
          json = await res.json();
        } catch (e) {
          if (res.ok) throw new AgentctlUnreachable(`agentctl ${path} answered ${res.status} without JSON`, { cause: e });
          json = undefined;
        }
        if (!res.ok) {
          const err = AgentctlErrorResponse.safeParse(json);
          throw new AgentctlHttpError(res.status, err.success ? err.data.error.code : null, err.success ? err.data.error.message : `agentctl ${path} answered ${res.status}`);
        }
        const parsed = schema.safeParse(json);
        if (!parsed.success) throw new AgentctlHttpError(res.status, 'INVALID_REPLY', `agentctl ${path} reply breaks its contract`);
        return parsed.data;
      },
    );
  }
}
