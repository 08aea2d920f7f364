import { KandevError, validationError } from '@kandev/contracts';
import {
  ATTR_ERROR_TYPE,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_MCP_METHOD_NAME,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
  inSpan,
  MCP_METHOD_NAME_VALUE_TOOLS_CALL,
  metrics,
  product,
  SpanKind,
  type AgentClaims,
  type Context,
  type Logger,
  type NatsConnection,
} from '@kandev/runtime';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { SpanStatusCode } from '@opentelemetry/api';
import { toolFailure, toolSuccess } from './domain/tool-result.js';
import type { Tool, ToolContext } from './tools/index.js';

export interface CallScope {
  nc: NatsConnection;
  log: Logger;
  caller: AgentClaims;
  /** The caller's own token, forwarded with every orchestrator request (verified there again). */
  callerToken: string;
  requestId: string;
  requestTimeoutMs: number;
  /** Trace context of the HTTP request's server span (continuing its `traceparent`), parent of every tool span. */
  trace: Context;
  /** Aborts when the caller cancels this call or its HTTP connection closes. */
  signal: AbortSignal;
}

/**
 * One `tools/call`, under a span that continues the caller's trace, logged with its outcome.
 *
 * Arguments are validated here, from the tool's own zod shape (unknown keys dropped), and not by the
 * SDK's McpServer, on purpose: McpServer reports a failure as a bare "Input validation error" text
 * with no code and no structuredContent, while the pinned failure shape is
 * `backend error [VALIDATION_ERROR]: …` with `{code, message}`.
 */
export async function callTool(tool: Tool | undefined, requested: string, args: unknown, scope: CallScope): Promise<CallToolResult> {
  // The MCP conventions' `{mcp.method.name} {target}`. Span names carry no caller-chosen text: an
  // unknown tool is `tools/call unknown`, the name it was called by is in gen_ai.tool.name.
  const spanName = `${MCP_METHOD_NAME_VALUE_TOOLS_CALL} ${tool ? tool.name : 'unknown'}`;
  return inSpan(spanName, { kind: SpanKind.SERVER, parent: scope.trace }, async (span) => {
    if (span.isRecording()) {
      span.setAttributes({
        [ATTR_MCP_METHOD_NAME]: MCP_METHOD_NAME_VALUE_TOOLS_CALL,
        [ATTR_GEN_AI_OPERATION_NAME]: GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
        [ATTR_GEN_AI_TOOL_NAME]: requested,
        'kandev.task_id': scope.caller.task_id,
        'kandev.request_id': scope.requestId,
      });
    }
    const started = performance.now();
    const ended = product.mcpToolCallStarted();
    const result = await runTool(tool, requested, args, scope).finally(ended);
    const code = result.isError ? String((result.structuredContent as { code?: unknown } | undefined)?.code ?? 'INTERNAL_ERROR') : 'OK';
    if (result.isError) {
      span.setAttribute('kandev.error_code', code);
      span.setAttribute(ATTR_ERROR_TYPE, code);
      if (code === 'INTERNAL_ERROR' || code === 'UNAVAILABLE') span.setStatus({ code: SpanStatusCode.ERROR, message: code });
    }
    // Label by the tool's own name, never the caller's text (an unknown name is `unknown`).
    metrics.mcpToolDuration.observe({ tool: tool ? tool.name : 'unknown', code }, (performance.now() - started) / 1000);
    const line = {
      task_id: scope.caller.task_id,
      session_id: scope.caller.session_id,
      execution_id: scope.caller.execution_id,
      request_id: scope.requestId,
      tool: requested,
      outcome: result.isError ? 'error' : 'ok',
      code,
      duration_ms: Math.round((performance.now() - started) * 10) / 10,
    };
    // Written once the answer is on its way (setImmediate runs after the response's write), as an
    // access log is: the line's synchronous write and its reader's wake-up stay off the caller's wait.
    setImmediate(() => scope.log.info(line, 'mcp tool call'));
    return result;
  });
}

async function runTool(tool: Tool | undefined, requested: string, args: unknown, scope: CallScope): Promise<CallToolResult> {
  if (!tool) return toolFailure(new KandevError('UNKNOWN_ACTION', `tool ${requested} is not available in ${scope.caller.mode} mode`));
  const parsed = tool.schema.safeParse(args ?? {});
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message }));
    const summary = issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join('; ');
    return toolFailure(validationError(`invalid arguments for ${tool.name}: ${summary}`, { issues }));
  }
  const ctx: ToolContext = {
    nc: scope.nc,
    caller: scope.caller,
    callerToken: scope.callerToken,
    requestId: scope.requestId,
    requestTimeoutMs: scope.requestTimeoutMs,
    signal: scope.signal,
  };
  try {
    return toolSuccess(await tool.run(parsed.data, ctx));
  } catch (e) {
    if (!(e instanceof KandevError)) scope.log.error({ err: e, tool: tool.name }, 'mcp tool failed unexpectedly');
    return toolFailure(e);
  }
}
