/*
 * The two wire formats the stub reads, reduced to what a script needs: which tools the agent offered
 * the model, what the user said in the latest turn, and which tool results came back. Read from the
 * requests the published agents really send (Codex 0.169: OpenAI Responses with MCP tools inside a
 * `namespace` tool; Claude Code: Anthropic Messages with MCP tools named `mcp__<server>__<tool>`;
 * Gemini CLI 0.61: Gemini `generateContent` with `functionDeclarations`).
 */

export type ModelApi = 'responses' | 'messages' | 'gemini';

export interface ToolOffer {
  name: string;
  /** Codex groups MCP tools in a `namespace` tool (e.g. `mcp__kandev`); the call names it back. */
  namespace?: string;
  /** `<namespace>__<name>` for namespaced tools, else the name. */
  qualified: string;
}

export interface ToolResult {
  callId: string;
  output: string;
}

export interface NormalisedRequest {
  api: ModelApi;
  model: string;
  stream: boolean;
  tools: ToolOffer[];
  /** Text of the user turn this request answers (the items after the last assistant/tool item). */
  userText: string;
  /** Tool results at the end of the conversation: the request continues after a tool call. */
  toolResults: ToolResult[];
}

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const arr = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
const str = (v: unknown): string => (typeof v === 'string' ? v : v === undefined ? '' : JSON.stringify(v));

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  return arr(content)
    .map((c) => (isObj(c) && typeof c.text === 'string' ? c.text : ''))
    .filter(Boolean)
    .join('\n');
}

export function normaliseResponses(body: Json): NormalisedRequest {
  const tools: ToolOffer[] = [];
  for (const t of arr(body.tools)) {
    if (!isObj(t) || typeof t.name !== 'string') continue;
    if (t.type === 'namespace') {
      for (const inner of arr(t.tools))
        if (isObj(inner) && typeof inner.name === 'string') tools.push({ name: inner.name, namespace: t.name, qualified: `${t.name}__${inner.name}` });
    } else tools.push({ name: t.name, qualified: t.name });
  }
  const input = typeof body.input === 'string' ? [{ type: 'message', role: 'user', content: body.input }] : arr(body.input).filter(isObj);
  const toolResults: ToolResult[] = [];
  let i = input.length - 1;
  for (; i >= 0 && input[i]!.type === 'function_call_output'; i--)
    toolResults.unshift({ callId: str(input[i]!.call_id), output: textOf(input[i]!.output) || str(input[i]!.output) });
  const userTexts: string[] = [];
  if (toolResults.length === 0) {
    for (; i >= 0; i--) {
      const item = input[i]!;
      if (item.type !== 'message' && item.type !== undefined) break;
      if (item.role !== 'user') break;
      userTexts.unshift(textOf(item.content));
    }
  }
  return { api: 'responses', model: str(body.model), stream: body.stream === true, tools, userText: userTexts.join('\n'), toolResults };
}

export function normaliseMessages(body: Json): NormalisedRequest {
  const tools: ToolOffer[] = arr(body.tools)
    .filter(isObj)
    .filter((t) => typeof t.name === 'string')
    .map((t) => ({ name: t.name as string, qualified: t.name as string }));
  const messages = arr(body.messages).filter(isObj);
  const last = messages.at(-1);
  const blocks =
    last && last.role === 'user' ? (typeof last.content === 'string' ? [{ type: 'text', text: last.content }] : arr(last.content).filter(isObj)) : [];
  const toolResults: ToolResult[] = blocks
    .filter((b) => b.type === 'tool_result')
    .map((b) => ({ callId: str(b.tool_use_id), output: textOf(b.content) || str(b.content) }));
  const userText = toolResults.length
    ? ''
    : blocks
        .map((b) => (b.type === 'text' ? str(b.text) : ''))
        .filter(Boolean)
        .join('\n');
  return { api: 'messages', model: str(body.model), stream: body.stream === true, tools, userText, toolResults };
}

/** Gemini `models/<model>:streamGenerateContent`: contents of role user/model, parts text/functionCall/functionResponse. */
export function normaliseGemini(body: Json, model: string, stream: boolean): NormalisedRequest {
  const tools: ToolOffer[] = [];
  for (const t of arr(body.tools).filter(isObj)) {
    for (const f of arr(t.functionDeclarations ?? t.function_declarations).filter(isObj))
      if (typeof f.name === 'string') tools.push({ name: f.name, qualified: f.name });
  }
  const contents = arr(body.contents).filter(isObj);
  const last = contents.at(-1);
  const parts = last && last.role === 'user' ? arr(last.parts).filter(isObj) : [];
  const toolResults: ToolResult[] = parts
    .filter((p) => isObj(p.functionResponse))
    .map((p) => {
      const r = p.functionResponse as Json;
      return { callId: str(r.id ?? r.name), output: str(r.response) };
    });
  const userTexts: string[] = [];
  if (toolResults.length === 0) {
    for (let i = contents.length - 1; i >= 0 && contents[i]!.role === 'user'; i--) {
      userTexts.unshift(
        arr(contents[i]!.parts)
          .filter(isObj)
          .map((p) => (typeof p.text === 'string' ? p.text : ''))
          .filter(Boolean)
          .join('\n'),
      );
    }
  }
  return { api: 'gemini', model, stream, tools, userText: userTexts.join('\n'), toolResults };
}

/**
 * The offered tool a script names: exact name, qualified name, or a `_<name>` suffix (Claude Code's
 * `mcp__kandev__x`, Gemini CLI's `mcp_kandev_x`).
 */
export function findTool(tools: ToolOffer[], wanted: string): ToolOffer | undefined {
  return (
    tools.find((t) => t.qualified === wanted) ??
    tools.find((t) => t.name === wanted && !t.namespace) ??
    tools.find((t) => t.name === wanted) ??
    tools.find((t) => t.qualified.endsWith(`_${wanted}`))
  );
}
