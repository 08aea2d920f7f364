import {
  AgentctlCancelResponse,
  AgentctlErrorResponse,
  AgentctlPaths,
  AgentctlPermissionAnswerResponse,
  AgentctlPromptResponse,
  type AgentctlPermissionAnswerRequest,
  AgentctlStopResponse,
} from '@kandev/contracts';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_URL_FULL,
  ATTR_URL_PATH,
  SpanKind,
  inSpan,
  traceHeaders,
} from '@kandev/runtime';
import { Agent, request as httpRequest } from 'node:http';
import type { z } from 'zod';

/**
 * One keep-alive pool for every agentctl on this instance: a cancel is on the latency-critical
 * path, and node:http with a warm socket costs a fraction of fetch's per-request overhead.
 */
const keepAlive = new Agent({ keepAlive: true, maxSockets: 8 });

function postJson(url: URL, body: string, headers: Record<string, string>, timeoutMs: number): Promise<{ status: number; ok: boolean; text: string }> {
  return new Promise((resolve, reject) => {
    // A deadline of our own: a socket timeout would linger on the pooled socket after this request.
    const deadline = setTimeout(() => req.destroy(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs);
    const fail = (e: Error) => {
      clearTimeout(deadline);
      reject(e);
    };
    const req = httpRequest(
      url,
      { method: 'POST', agent: keepAlive, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), ...headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          clearTimeout(deadline);
          const status = res.statusCode ?? 0;
          resolve({ status, ok: status >= 200 && status < 300, text: Buffer.concat(chunks).toString('utf8') });
        });
        res.on('error', fail);
      },
    );
    req.on('error', fail);
    req.end(body);
  });
}

/** agentctl answered with an error status (409, 504, ...). */
export class AgentctlHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | null,
    message: string,
    /** The error body's `details` (how a permission request already ended, say). */
    readonly details?: Record<string, unknown>,
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
  /** `secret`: the execution's own, sent as a bearer token with every call. */
  constructor(
    readonly baseUrl: string,
    private readonly secret: string,
  ) {}

  prompt(prompt: string, turnId: string, context?: string, timeoutMs = 10_000) {
    return this.post(AgentctlPaths.prompt, { prompt, turn_id: turnId, ...(context ? { context } : {}) }, AgentctlPromptResponse, timeoutMs);
  }

  cancel(turnId: string | undefined, timeoutMs: number) {
    return this.post(AgentctlPaths.cancel, turnId ? { turn_id: turnId } : {}, AgentctlCancelResponse, timeoutMs);
  }

  /** Answers a permission request the agent waits on (flows/permissions.ts). */
  answerPermission(answer: AgentctlPermissionAnswerRequest, timeoutMs: number) {
    return this.post(AgentctlPaths.permission, answer, AgentctlPermissionAnswerResponse, timeoutMs);
  }

  stop(graceMs: number, timeoutMs: number) {
    return this.post(AgentctlPaths.stop, { grace_ms: graceMs }, AgentctlStopResponse, timeoutMs);
  }

  private post<S extends z.ZodType>(path: string, body: unknown, schema: S, timeoutMs: number): Promise<z.infer<S>> {
    // The HTTP client conventions' `{method} {url.template}`: agentctl's paths carry no ids.
    return inSpan(`POST ${path}`, { kind: SpanKind.CLIENT }, async (span) => {
      const url = new URL(path, this.baseUrl);
      if (span.isRecording()) {
        span.setAttributes({
          [ATTR_HTTP_REQUEST_METHOD]: 'POST',
          [ATTR_URL_FULL]: url.href,
          [ATTR_URL_PATH]: path,
          [ATTR_SERVER_ADDRESS]: url.hostname,
          [ATTR_SERVER_PORT]: Number(url.port),
        });
      }
      let res: { status: number; ok: boolean; text: string };
      try {
        res = await postJson(url, JSON.stringify(body), { ...traceHeaders(), authorization: `Bearer ${this.secret}` }, timeoutMs);
      } catch (e) {
        throw new AgentctlUnreachable(`agentctl ${path} failed: ${(e as Error).message}`, { cause: e });
      }
      span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, res.status);
      let json: unknown;
      try {
        json = JSON.parse(res.text);
      } catch (e) {
        if (res.ok) throw new AgentctlUnreachable(`agentctl ${path} answered ${res.status} without JSON`, { cause: e });
        json = undefined;
      }
      if (!res.ok) {
        const err = AgentctlErrorResponse.safeParse(json);
        throw new AgentctlHttpError(
          res.status,
          err.success ? err.data.error.code : null,
          err.success ? err.data.error.message : `agentctl ${path} answered ${res.status}`,
          err.success ? err.data.error.details : undefined,
        );
      }
      const parsed = schema.safeParse(json);
      if (!parsed.success) throw new AgentctlHttpError(res.status, 'INVALID_REPLY', `agentctl ${path} reply breaks its contract`);
      return parsed.data;
    });
  }
}
