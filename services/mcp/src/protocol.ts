import { McpMode } from '@kandev/contracts';
import {
  CallToolRequestParamsSchema,
  ErrorCode,
  InitializeRequestParamsSchema,
  LATEST_PROTOCOL_VERSION,
  SUPPORTED_PROTOCOL_VERSIONS,
  type InitializeResult,
  type JSONRPCRequest,
  type ListToolsResult,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { instructionsFor } from './domain/guidance.js';
import { callTool, type CallScope } from './tool-call.js';
import { toolsFor, type Tool } from './tools/index.js';

export const SERVER_INFO = { name: 'kandev', version: '0.1.0' } as const;

/** One JSON-RPC answer: a result or an error, for the request id it answers. */
export type JsonRpcAnswer =
  { jsonrpc: '2.0'; id: RequestId; result: Record<string, unknown> } | { jsonrpc: '2.0'; id: RequestId | null; error: { code: number; message: string } };

/** Everything a mode answers that does not depend on the call: built once at start-up. */
interface ModeTable {
  initialize: Omit<InitializeResult, 'protocolVersion'>;
  toolsList: ListToolsResult;
  tools: ReadonlyMap<string, Tool>;
}

function buildTable(mode: McpMode): ModeTable {
  const tools = toolsFor(mode);
  const instructions = instructionsFor(mode);
  return {
    initialize: { capabilities: { tools: {} }, serverInfo: { ...SERVER_INFO }, ...(instructions ? { instructions } : {}) },
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

const TABLES: ReadonlyMap<McpMode, ModeTable> = new Map(McpMode.options.map((mode) => [mode, buildTable(mode)]));

const ok = (id: RequestId, result: Record<string, unknown>): JsonRpcAnswer => ({ jsonrpc: '2.0', id, result });
const fail = (id: RequestId | null, code: number, message: string): JsonRpcAnswer => ({ jsonrpc: '2.0', id, error: { code, message } });

/** A wrong `params` is the caller's to fix: say which field, never echo a schema dump. */
function invalidParams(id: RequestId, method: string, issues: ReadonlyArray<{ path: PropertyKey[]; message: string }>): JsonRpcAnswer {
  const first = issues[0];
  const where = first && first.path.length ? `params.${first.path.map(String).join('.')}` : 'params';
  const what =
    method === 'tools/call'
      ? where === 'params.arguments'
        ? 'params.arguments must be an object'
        : where === 'params.name'
          ? 'params.name must be a string naming a tool'
          : `${where} is invalid`
      : `${where} is invalid`;
  return fail(id, ErrorCode.InvalidParams, `Invalid params for ${method}: ${what}`);
}

/**
 * Answer one JSON-RPC request of the stateless MCP server (Streamable HTTP, one HTTP request per
 * call): the methods a tools-only server has (`initialize`, `ping`, `tools/list`, `tools/call`),
 * answered from tables built once per mode and validated with the SDK's own schemas. This is what
 * the SDK's `Server` does for these methods; building a `Server` and a transport per HTTP request
 * cost more than the rest of a call (bench/RESULTS.md, "MCP handling"), and the SDK refuses to reuse
 * a stateless transport.
 */
export async function answerRequest(req: JSONRPCRequest, scope: CallScope): Promise<JsonRpcAnswer> {
  const table = TABLES.get(scope.caller.mode)!;
  switch (req.method) {
    case 'initialize': {
      const params = InitializeRequestParamsSchema.safeParse(req.params);
      if (!params.success) return invalidParams(req.id, req.method, params.error.issues);
      const requested = params.data.protocolVersion;
      const protocolVersion = SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION;
      return ok(req.id, { protocolVersion, ...table.initialize });
    }
    case 'ping':
      return ok(req.id, {});
    case 'tools/list':
      return ok(req.id, table.toolsList);
    case 'tools/call': {
      const params = CallToolRequestParamsSchema.safeParse(req.params);
      if (!params.success) return invalidParams(req.id, req.method, params.error.issues);
      const { name, arguments: args } = params.data;
      return ok(req.id, await callTool(table.tools.get(name), name, args, scope));
    }
    default:
      return fail(req.id, ErrorCode.MethodNotFound, 'Method not found');
  }
}
