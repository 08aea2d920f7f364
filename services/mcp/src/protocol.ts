/**
 * The MCP server of one POST: the SDK's low-level `Server` (JSON-RPC dispatch, `initialize`, `ping`,
 * method-not-found) following MCP specification revision 2025-11-25, on the SDK's
 * `StreamableHTTPServerTransport` (http.ts), answering `tools/list` and `tools/call` from tables
 * built once per token mode at start-up. ADR 0042: the SDK provides the transport and dispatch; the
 * HTTP front (auth, Origin/Host, body reading, spans) and the tool calls stay ours.
 */
import { McpMode } from '@kandev/contracts';
import { Server, type ServerOptions } from '@modelcontextprotocol/sdk/server/index.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv-provider.js';
import {
  CallToolRequestSchema,
  CancelledNotificationSchema,
  ErrorCode,
  InitializeRequestSchema,
  isJSONRPCRequest,
  ListToolsRequestSchema,
  type CallToolResult,
  type JSONRPCErrorResponse,
  type JSONRPCMessage,
  type ListToolsResult,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { instructionsFor } from './domain/guidance.js';
import { toolsFor, type Tool } from './tools/index.js';

export const SERVER_INFO = { name: 'kandev', version: '0.1.0' } as const;

/** Everything a mode answers that does not depend on the call: built once at start-up. */
interface ModeTable {
  options: ServerOptions;
  toolsList: ListToolsResult;
  tools: ReadonlyMap<string, Tool>;
}

function buildTable(mode: McpMode): ModeTable {
  const tools = toolsFor(mode);
  const instructions = instructionsFor(mode);
  return {
    options: { capabilities: { tools: {} }, jsonSchemaValidator: JSON_SCHEMA_VALIDATOR, ...(instructions ? { instructions } : {}) },
    toolsList: {
      tools: [...tools.values()].map((t) => ({
        name: t.name,
        title: t.title,
        description: t.description,
        inputSchema: t.inputJsonSchema,
        annotations: t.annotations,
      })),
    },
    tools,
  };
}

/**
 * A `Server` not given a JSON Schema validator builds its own Ajv instance (with formats): about
 * 1.3 ms per construction, so per POST. It only checks elicitation answers, which this server never
 * asks for; one, built at start, serves every `Server`.
 */
const JSON_SCHEMA_VALIDATOR = new AjvJsonSchemaValidator();

const TABLES: ReadonlyMap<McpMode, ModeTable> = new Map(McpMode.options.map((mode) => [mode, buildTable(mode)]));

/** Runs one `tools/call` (tool-call.ts), `signal` being the SDK's for this request (aborted when the transport closes). */
export type RunTool = (tool: Tool | undefined, name: string, args: unknown, id: RequestId, signal: AbortSignal) => Promise<CallToolResult>;

/**
 * The SDK `Server` of one POST for a token of `mode`: `tools/list` from the table, `tools/call`
 * through `run`, and `notifications/cancelled` handed to `cancelled` (the SDK's own handler only
 * aborts requests of the same Server, i.e. of the same POST; ours reaches every replica,
 * cancellation.ts). Per request, as the SDK requires of a stateless transport; what is built here
 * is handler registration only, the answers are the start-up tables.
 */
export function serverFor(mode: McpMode, run: RunTool, cancelled: (id: RequestId) => void): Server {
  const table = TABLES.get(mode)!;
  const server = new Server(SERVER_INFO, table.options);
  server.setRequestHandler(ListToolsRequestSchema, () => table.toolsList);
  server.setRequestHandler(CallToolRequestSchema, (request, extra) => {
    const { name, arguments: args } = request.params;
    return run(table.tools.get(name), name, args, extra.requestId, extra.signal);
  });
  server.setNotificationHandler(CancelledNotificationSchema, (n) => {
    if (n.params.requestId !== undefined) cancelled(n.params.requestId);
  });
  return server;
}

/** The methods whose params the SDK would refuse with its schema's own words (a zod dump, -32603 for initialize). */
const CHECKED = new Map<string, typeof InitializeRequestSchema | typeof CallToolRequestSchema>([
  ['initialize', InitializeRequestSchema],
  ['tools/call', CallToolRequestSchema],
]);

/**
 * A request whose params are not what its method takes, answered -32602 naming the field and never
 * echoing a schema dump (test/protocol.test.ts); undefined for anything else. The SDK answers such
 * a request with the zod error's text (and `initialize` with -32603), so this runs before it.
 */
export function invalidParams(message: JSONRPCMessage): JSONRPCErrorResponse | undefined {
  if (!isJSONRPCRequest(message)) return undefined;
  const schema = CHECKED.get(message.method);
  const parsed = schema?.safeParse(message);
  if (!parsed || parsed.success) return undefined;
  const first = parsed.error.issues[0];
  const where = first && first.path.length ? first.path.map(String).join('.') : 'params';
  const what =
    message.method === 'tools/call'
      ? where === 'params.arguments'
        ? 'params.arguments must be an object'
        : where === 'params.name'
          ? 'params.name must be a string naming a tool'
          : `${where} is invalid`
      : `${where} is invalid`;
  return { jsonrpc: '2.0', id: message.id, error: { code: ErrorCode.InvalidParams, message: `Invalid params for ${message.method}: ${what}` } };
}

/**
 * `server.connect(transport)`, with `invalidParams` in front of the server: a request it refuses is
 * answered through the transport (so a batch still gets one array, in order) and never dispatched.
 */
export async function connect(server: Server, transport: Transport): Promise<void> {
  await server.connect(transport);
  const dispatch = transport.onmessage!;
  transport.onmessage = (message, extra) => {
    const refusal = invalidParams(message);
    if (!refusal) return dispatch(message, extra);
    transport.send(refusal).catch((e: unknown) => server.onerror?.(e instanceof Error ? e : new Error(String(e))));
  };
}
