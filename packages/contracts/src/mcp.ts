import { z } from 'zod';
import { SUBJECT_PREFIX } from './subjects.js';

/**
 * MCP cancellation across mcp replicas (ADR 0037). The MCP server is stateless, so an agent's
 * `notifications/cancelled` is a POST of its own and may land on another replica than the call it
 * names. The replica that receives it publishes this message on a core subject every mcp replica
 * subscribes to (no queue group: all of them get it); the one holding the call aborts it.
 *
 * The call is named by its caller and its JSON-RPC id. The caller is the SHA-256 of the agent's
 * bearer token (hex), never the token itself: a replica holding a call computes the same digest
 * from the token that call was authenticated with, so a cancel reaches only calls of the same
 * token, and the token does not travel. Only the mcp NATS user may publish here
 * (deploy/nats/permissions.conf).
 */
export const McpCallCancelled = {
  subject: `${SUBJECT_PREFIX}.mcp.call.cancelled`,
  message: z.object({
    /** SHA-256 of the caller's agent token, lowercase hex. */
    caller: z.string().regex(/^[0-9a-f]{64}$/),
    /** The JSON-RPC id of the cancelled request, as the caller sent it. */
    request_id: z.union([z.string().min(1).max(200), z.number().int()]),
    /** The mcp instance that received the notification (for logs). */
    from_instance: z.string().min(1).max(200),
  }),
} as const;
export type McpCallCancelled = z.infer<typeof McpCallCancelled.message>;
