import { isKandevError, type ErrorBody } from '@kandev/contracts';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';

/** A successful call: the same JSON object as text (for any client) and as structuredContent. */
export function toolSuccess(result: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text: JSON.stringify(result) }], structuredContent: result };
}

/**
 * A failed call is a tool result, not a protocol error, so the agent can read it and correct
 * itself (INTERFACES "MCP": `backend error [CODE]: message`, structuredContent `{code, message}`).
 * Anything that is not a KandevError is reported as INTERNAL_ERROR without its message.
 */
export function toolFailure(e: unknown): CallToolResult {
  const body: ErrorBody = isKandevError(e) ? e.toBody() : { code: 'INTERNAL_ERROR', message: 'internal error' };
  return {
    isError: true,
    content: [{ type: 'text', text: `backend error [${body.code}]: ${body.message}` }],
    structuredContent: { ...body },
  };
}
