import { appendFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { findDirective } from './directive.js';
import { findTool, normaliseGemini, normaliseMessages, normaliseResponses, type ModelApi, type NormalisedRequest, type ToolOffer } from './request.js';

/*
 * A local model for the published agents: the streaming OpenAI Responses API (`POST /v1/responses`,
 * what Codex speaks with `wire_api = "responses"`) and the Anthropic Messages API
 * (`POST /v1/messages`, Claude Code with ANTHROPIC_BASE_URL). Each request is answered from the
 * `@@stub` directive in the prompt (see directive.ts). The stub records every request and every
 * stream, and in particular whether the client closed a stream before it ended: that is how a test
 * sees an agent abort its model request on cancel.
 */

export interface StubUsage {
  input: number;
  cachedInput: number;
  output: number;
}

export interface RecordedRequest extends NormalisedRequest {
  index: number;
  at: number;
  path: string;
  /** What the stub did with it. */
  reply: Reply['kind'];
}

export interface RecordedStream {
  request: number;
  api: ModelApi;
  openedAt: number;
  /** Set when the stream ended: by the stub finishing it, or by the client going away first. */
  endedAt: number | undefined;
  closedByClient: boolean;
}

export interface ToolCallRecord {
  callId: string;
  tool: ToolOffer;
  args: Record<string, unknown>;
  then: string;
  /** Set once a request carried this call's result back. */
  result: string | undefined;
}

type Reply = { kind: 'text'; text: string } | { kind: 'slow'; ms: number; everyMs: number } | { kind: 'tool'; call: ToolCallRecord };

export interface ModelStub {
  /** `http://127.0.0.1:<port>`; Codex wants `${url}/v1` as base_url, Claude Code `url` as ANTHROPIC_BASE_URL. */
  url: string;
  requests: RecordedRequest[];
  streams: RecordedStream[];
  toolCalls: ToolCallRecord[];
  /** Streams still being written. */
  openStreams(): RecordedStream[];
  stop(): Promise<void>;
}

export interface ModelStubOptions {
  /** Token counts reported per response (usage is what lets a test check usage mapping). */
  usage?: Partial<StubUsage>;
  /** Append each raw request (path, headers, body) as a JSON line here: how to read what an agent sends. */
  logFile?: string;
}

/** Epoch ms with sub-millisecond precision: the stub's timestamps, comparable with `preciseEpoch()` of the same process. */
export const preciseEpoch = (): number => performance.timeOrigin + performance.now();

const DEFAULT_USAGE: StubUsage = { input: 1200, cachedInput: 200, output: 40 };

export async function startModelStub(opts: ModelStubOptions = {}): Promise<ModelStub> {
  const usage = { ...DEFAULT_USAGE, ...opts.usage };
  const logFile = opts.logFile ?? process.env.MODEL_STUB_LOG;
  const requests: RecordedRequest[] = [];
  const streams: RecordedStream[] = [];
  const toolCalls: ToolCallRecord[] = [];
  let ids = 0;
  const nextId = (p: string) => `${p}_${++ids}_${Date.now().toString(36)}`;

  function decide(req: NormalisedRequest): Reply {
    if (req.toolResults.length > 0) {
      const answered = req.toolResults
        .map((r) => ({ r, call: toolCalls.find((c) => c.callId === r.callId) ?? toolCalls.find((c) => c.result === undefined && c.tool.name === r.callId) }))
        .filter((x) => x.call);
      for (const { r, call } of answered) call!.result = r.output;
      const first = answered[0];
      return { kind: 'text', text: first ? `${first.call!.then}: ${first.r.output.slice(0, 2000)}` : 'ok' };
    }
    const directive = findDirective(req.userText);
    // Requests without tools are the agents' side calls (titles, summaries): never scripted.
    if (!directive || req.tools.length === 0) return { kind: 'text', text: 'ok' };
    if ('say' in directive) return { kind: 'text', text: directive.say };
    if ('slow' in directive) return { kind: 'slow', ms: directive.slow.ms, everyMs: directive.slow.every_ms };
    const tool = findTool(req.tools, directive.tool);
    if (!tool) return { kind: 'text', text: `the script names tool ${directive.tool}, which the agent did not offer` };
    const call: ToolCallRecord = {
      callId: nextId(req.api === 'messages' ? 'toolu' : 'call'),
      tool,
      args: directive.args,
      then: directive.then,
      result: undefined,
    };
    toolCalls.push(call);
    return { kind: 'tool', call };
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const raw = await readBody(req);
    const path = (req.url ?? '/').split('?')[0]!;
    if (logFile) appendFileSync(logFile, `${JSON.stringify({ t: Date.now(), method: req.method, path, headers: req.headers, body: raw })}\n`);
    if (req.method !== 'POST') return void json(res, 404, { error: { message: `no ${req.method} ${path}` } });
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
    } catch {
      return void json(res, 400, { error: { message: 'body is not JSON' } });
    }
    if (path.endsWith('/messages/count_tokens')) return void json(res, 200, { input_tokens: usage.input });
    const gemini = /\/models\/([^/:]+):(streamGenerateContent|generateContent)$/.exec(path);
    const api: ModelApi | undefined = path.endsWith('/responses') ? 'responses' : path.endsWith('/messages') ? 'messages' : gemini ? 'gemini' : undefined;
    if (!api) return void json(res, 404, { error: { message: `the model stub does not serve ${path}` } });
    const normalised =
      api === 'responses'
        ? normaliseResponses(body)
        : api === 'messages'
          ? normaliseMessages(body)
          : normaliseGemini(body, gemini![1]!, gemini![2] === 'streamGenerateContent');
    const reply = decide(normalised);
    const record: RecordedRequest = { ...normalised, index: requests.length, at: preciseEpoch(), path, reply: reply.kind };
    requests.push(record);
    if (!normalised.stream) {
      if (api === 'messages') return void json(res, 200, anthropicMessage(reply, normalised.model, usage, nextId));
      if (api === 'gemini') return void json(res, 200, geminiChunk(geminiParts(reply, body), 'STOP', usage));
      return void json(res, 400, { error: { message: 'only streaming Responses are served' } });
    }
    const stream: RecordedStream = { request: record.index, api, openedAt: preciseEpoch(), endedAt: undefined, closedByClient: false };
    streams.push(stream);
    const writer =
      api === 'responses'
        ? responsesWriter(res, nextId, usage)
        : api === 'messages'
          ? messagesWriter(res, normalised.model, nextId, usage)
          : geminiWriter(res, usage);
    res.on('close', () => {
      if (stream.endedAt === undefined) {
        stream.endedAt = preciseEpoch();
        stream.closedByClient = true;
      }
    });
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    writer.begin();
    if (reply.kind === 'tool') writer.toolCall(reply.call);
    else if (reply.kind === 'text') writer.text(reply.text);
    else {
      const until = Date.now() + reply.ms;
      let n = 0;
      writer.startText();
      while (Date.now() < until && !stream.closedByClient) {
        writer.delta(`tick ${++n} `);
        await sleep(reply.everyMs);
      }
      if (stream.closedByClient) return;
      writer.endText();
    }
    stream.endedAt = preciseEpoch();
    writer.finish(reply.kind === 'tool');
    res.end();
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) json(res, 500, { error: { message: String(err) } });
      else res.destroy();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    streams,
    toolCalls,
    openStreams: () => streams.filter((s) => s.endedAt === undefined),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

// ---------------------------------------------------------------- wire writers

interface StreamWriter {
  begin(): void;
  text(text: string): void;
  startText(): void;
  delta(text: string): void;
  endText(): void;
  toolCall(call: ToolCallRecord): void;
  finish(toolUse: boolean): void;
}

function sse(res: ServerResponse, event: string, data: Record<string, unknown>): void {
  if (!res.writableEnded && !res.destroyed) res.write(`event: ${event}\ndata: ${JSON.stringify({ type: event, ...data })}\n\n`);
}

/** OpenAI Responses stream events, the subset Codex reads: created, output items, text deltas, completed (with usage). */
function responsesWriter(res: ServerResponse, nextId: (p: string) => string, usage: StubUsage): StreamWriter {
  const responseId = nextId('resp');
  let output = 0;
  let messageId = '';
  let text = '';
  const w: StreamWriter = {
    begin: () => sse(res, 'response.created', { response: { id: responseId, status: 'in_progress' } }),
    startText() {
      messageId = nextId('msg');
      text = '';
      sse(res, 'response.output_item.added', {
        output_index: output,
        item: { type: 'message', id: messageId, role: 'assistant', status: 'in_progress', content: [] },
      });
    },
    delta(t) {
      text += t;
      sse(res, 'response.output_text.delta', { item_id: messageId, output_index: output, content_index: 0, delta: t });
    },
    endText() {
      sse(res, 'response.output_item.done', {
        output_index: output++,
        item: { type: 'message', id: messageId, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text, annotations: [] }] },
      });
    },
    text(t) {
      w.startText();
      w.delta(t);
      w.endText();
    },
    toolCall(call) {
      const item = {
        type: 'function_call',
        id: nextId('fc'),
        call_id: call.callId,
        name: call.tool.name,
        ...(call.tool.namespace ? { namespace: call.tool.namespace } : {}),
        arguments: JSON.stringify(call.args),
        status: 'completed',
      };
      sse(res, 'response.output_item.added', { output_index: output, item: { ...item, arguments: '', status: 'in_progress' } });
      sse(res, 'response.output_item.done', { output_index: output++, item });
    },
    finish: () =>
      sse(res, 'response.completed', {
        response: {
          id: responseId,
          status: 'completed',
          usage: {
            input_tokens: usage.input,
            input_tokens_details: { cached_tokens: usage.cachedInput },
            output_tokens: usage.output,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: usage.input + usage.output,
          },
        },
      }),
  };
  return w;
}

/** Anthropic Messages stream events: message_start, content blocks (text or tool_use), message_delta, message_stop. */
function messagesWriter(res: ServerResponse, model: string, nextId: (p: string) => string, usage: StubUsage): StreamWriter {
  let block = 0;
  const w: StreamWriter = {
    begin: () =>
      sse(res, 'message_start', {
        message: {
          id: nextId('msg'),
          type: 'message',
          role: 'assistant',
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: {
            input_tokens: usage.input - usage.cachedInput,
            cache_read_input_tokens: usage.cachedInput,
            cache_creation_input_tokens: 0,
            output_tokens: 1,
          },
        },
      }),
    startText: () => sse(res, 'content_block_start', { index: block, content_block: { type: 'text', text: '' } }),
    delta: (t) => sse(res, 'content_block_delta', { index: block, delta: { type: 'text_delta', text: t } }),
    endText: () => sse(res, 'content_block_stop', { index: block++ }),
    text(t) {
      w.startText();
      w.delta(t);
      w.endText();
    },
    toolCall(call) {
      sse(res, 'content_block_start', { index: block, content_block: { type: 'tool_use', id: call.callId, name: call.tool.qualified, input: {} } });
      sse(res, 'content_block_delta', { index: block, delta: { type: 'input_json_delta', partial_json: JSON.stringify(call.args) } });
      sse(res, 'content_block_stop', { index: block++ });
    },
    finish(toolUse) {
      sse(res, 'message_delta', { delta: { stop_reason: toolUse ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: { output_tokens: usage.output } });
      sse(res, 'message_stop', {});
    },
  };
  return w;
}

/** Gemini streams bare `data:` lines, each a GenerateContentResponse; the last one has finishReason and usage. */
function geminiWriter(res: ServerResponse, usage: StubUsage): StreamWriter {
  const data = (chunk: Record<string, unknown>) => {
    if (!res.writableEnded && !res.destroyed) res.write(`data: ${JSON.stringify(chunk)}\n\n`);
  };
  const w: StreamWriter = {
    begin: () => undefined,
    startText: () => undefined,
    delta: (t) => data(geminiChunk([{ text: t }], undefined, undefined)),
    endText: () => undefined,
    text: (t) => w.delta(t),
    toolCall: (call) => data(geminiChunk([{ functionCall: { id: call.callId, name: call.tool.name, args: call.args } }], undefined, undefined)),
    finish: () => data(geminiChunk([{ text: '' }], 'STOP', usage)),
  };
  return w;
}

function geminiChunk(parts: unknown[], finishReason: string | undefined, usage: StubUsage | undefined): Record<string, unknown> {
  return {
    candidates: [{ content: { role: 'model', parts }, index: 0, ...(finishReason ? { finishReason } : {}) }],
    ...(usage
      ? {
          usageMetadata: {
            promptTokenCount: usage.input,
            cachedContentTokenCount: usage.cachedInput,
            candidatesTokenCount: usage.output,
            totalTokenCount: usage.input + usage.output,
          },
        }
      : {}),
  };
}

/** A non-streamed Gemini answer; a request for JSON (Gemini CLI's model router) gets `{}`. */
function geminiParts(reply: Reply, body: Record<string, unknown>): unknown[] {
  const config = body.generationConfig as Record<string, unknown> | undefined;
  if (config?.responseMimeType === 'application/json') return [{ text: '{}' }];
  if (reply.kind === 'tool') return [{ functionCall: { id: reply.call.callId, name: reply.call.tool.name, args: reply.call.args } }];
  return [{ text: reply.kind === 'text' ? reply.text : 'ok' }];
}

function anthropicMessage(reply: Reply, model: string, usage: StubUsage, nextId: (p: string) => string): Record<string, unknown> {
  const content =
    reply.kind === 'tool'
      ? [{ type: 'tool_use', id: reply.call.callId, name: reply.call.tool.qualified, input: reply.call.args }]
      : [{ type: 'text', text: reply.kind === 'text' ? reply.text : 'ok' }];
  return {
    id: nextId('msg'),
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: reply.kind === 'tool' ? 'tool_use' : 'end_turn',
    stop_sequence: null,
    usage: {
      input_tokens: usage.input - usage.cachedInput,
      cache_read_input_tokens: usage.cachedInput,
      cache_creation_input_tokens: 0,
      output_tokens: usage.output,
    },
  };
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
