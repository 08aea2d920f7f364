import { afterEach, describe, expect, it } from 'vitest';
import { findDirective, normaliseMessages, normaliseResponses, startModelStub, stubPrompt, type ModelStub } from '../src/model-stub/index.js';

/*
 * The model stub as the published agents use it. Request shapes are cut down from what Codex 0.169
 * (Responses API, MCP tools in a `namespace` tool) and Claude Code (Messages API, `mcp__kandev__*`
 * tools) really sent (MODEL_STUB_LOG).
 */

let stub: ModelStub | undefined;
afterEach(async () => {
  await stub?.stop();
  stub = undefined;
});

async function sse(res: Response): Promise<Array<{ event: string; data: any }>> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((b) => b.trim())
    .map((b) => ({ event: /event: (.*)/.exec(b)![1]!, data: JSON.parse(/data: (.*)/.exec(b)![1]!) }));
}

const post = (url: string, body: unknown, signal?: AbortSignal) =>
  fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal });

const codexTools = [
  { type: 'function', name: 'exec_command', parameters: {} },
  {
    type: 'namespace',
    name: 'mcp__kandev',
    tools: [
      { type: 'function', name: 'stop_task_kandev' },
      { type: 'function', name: 'message_task_kandev' },
    ],
  },
];

describe('directives', () => {
  it('reads the last @@stub line of the user turn, ignoring what follows the JSON', () => {
    expect(findDirective(`x\n${stubPrompt({ say: 'hi' })} trailing`)).toEqual({ say: 'hi' });
    expect(findDirective('@@stub {"slow":{}}')).toEqual({ slow: { ms: 60_000, every_ms: 200 } });
    expect(findDirective('no script here')).toBeUndefined();
    expect(findDirective('@@stub {"unknown":1}')).toBeUndefined();
  });
});

describe('request normalisation', () => {
  it('Responses: flattens namespace tools, takes the trailing user messages, sees tool results', () => {
    const prompt = normaliseResponses({
      model: 'gpt-5',
      stream: true,
      tools: codexTools,
      input: [
        { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'system' }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: '<environment_context/>' }] },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'do it' }] },
      ],
    });
    expect(prompt.tools.map((t) => t.qualified)).toEqual(['exec_command', 'mcp__kandev__stop_task_kandev', 'mcp__kandev__message_task_kandev']);
    expect(prompt.userText).toBe('<environment_context/>\ndo it');
    expect(prompt.toolResults).toEqual([]);
    const followUp = normaliseResponses({
      input: [
        { type: 'message', role: 'user', content: 'do it' },
        { type: 'function_call', call_id: 'c1' },
        { type: 'function_call_output', call_id: 'c1', output: 'done' },
      ],
    });
    expect(followUp).toMatchObject({ userText: '', toolResults: [{ callId: 'c1', output: 'done' }] });
  });

  it('Messages: tool_result blocks in the last user message are a follow-up', () => {
    const followUp = normaliseMessages({
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: [] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'ok!' }] }] },
      ],
    });
    expect(followUp).toMatchObject({ api: 'messages', userText: '', toolResults: [{ callId: 't1', output: 'ok!' }] });
  });
});

describe('startModelStub', () => {
  it('Responses: calls a namespaced tool, then finishes with the tool result', async () => {
    stub = await startModelStub();
    const first = await sse(
      await post(`${stub.url}/v1/responses`, {
        model: 'gpt-5',
        stream: true,
        tools: codexTools,
        input: [{ type: 'message', role: 'user', content: stubPrompt({ tool: 'stop_task_kandev', args: { task_id: 't' }, then: 'got' }) }],
      }),
    );
    const call = first.find((e) => e.event === 'response.output_item.done')!.data.item;
    expect(call).toMatchObject({ type: 'function_call', name: 'stop_task_kandev', namespace: 'mcp__kandev', arguments: '{"task_id":"t"}' });
    expect(first.at(-1)!.data.response.usage).toMatchObject({ input_tokens: 1200, input_tokens_details: { cached_tokens: 200 }, output_tokens: 40 });
    const second = await sse(
      await post(`${stub.url}/v1/responses`, {
        stream: true,
        tools: codexTools,
        input: [{ type: 'function_call_output', call_id: call.call_id, output: 'stopped' }],
      }),
    );
    expect(second.find((e) => e.event === 'response.output_item.done')!.data.item.content[0].text).toBe('got: stopped');
    expect(stub.toolCalls[0]!.result).toBe('stopped');
  });

  it('Messages: streams a tool_use block with Claude Code naming', async () => {
    stub = await startModelStub();
    const events = await sse(
      await post(`${stub.url}/v1/messages`, {
        model: 'claude-sonnet-4-5',
        stream: true,
        tools: [{ name: 'mcp__kandev__stop_task_kandev' }],
        messages: [{ role: 'user', content: stubPrompt({ tool: 'stop_task_kandev', args: { task_id: 't' } }) }],
      }),
    );
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events[1]!.data.content_block).toMatchObject({ type: 'tool_use', name: 'mcp__kandev__stop_task_kandev' });
    expect(events[4]!.data.delta.stop_reason).toBe('tool_use');
  });

  it('Gemini: calls an MCP tool named mcp_<server>_<tool>, then finishes with the functionResponse', async () => {
    stub = await startModelStub();
    const tools = [{ functionDeclarations: [{ name: 'run_shell_command' }, { name: 'mcp_kandev_stop_task_kandev' }] }];
    const url = `${stub.url}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse`;
    const first = await (
      await post(url, {
        tools,
        contents: [{ role: 'user', parts: [{ text: '<session_context/>' }, { text: stubPrompt({ tool: 'stop_task_kandev', args: { task_id: 't' } }) }] }],
      })
    ).text();
    const chunks = first
      .split('\n\n')
      .filter(Boolean)
      .map((c) => JSON.parse(c.replace(/^data: /, '')));
    const call = chunks[0].candidates[0].content.parts[0].functionCall;
    expect(call).toMatchObject({ name: 'mcp_kandev_stop_task_kandev', args: { task_id: 't' } });
    expect(chunks.at(-1)).toMatchObject({ candidates: [{ finishReason: 'STOP' }], usageMetadata: { promptTokenCount: 1200, candidatesTokenCount: 40 } });
    await post(url, {
      tools,
      contents: [
        { role: 'user', parts: [{ text: 'x' }] },
        { role: 'model', parts: [{ functionCall: call }] },
        { role: 'user', parts: [{ functionResponse: { id: call.id, name: call.name, response: { output: 'stopped' } } }] },
      ],
    });
    expect(stub.toolCalls[0]!.result).toBe('{"output":"stopped"}');
  });

  it('keeps a slow stream open and records that the client closed it', async () => {
    stub = await startModelStub();
    const abort = new AbortController();
    const res = await post(
      `${stub.url}/v1/messages`,
      { stream: true, tools: [{ name: 'Bash' }], messages: [{ role: 'user', content: stubPrompt({ slow: { ms: 30_000, every_ms: 20 } }) }] },
      abort.signal,
    );
    const reader = res.body!.getReader();
    await reader.read();
    expect(stub.openStreams()).toHaveLength(1);
    abort.abort();
    const s = stub.streams[0]!;
    for (let i = 0; i < 200 && s.endedAt === undefined; i++) await new Promise((r) => setTimeout(r, 10));
    expect(s).toMatchObject({ closedByClient: true });
    expect(s.endedAt).toBeGreaterThan(s.openedAt);
  });

  it('answers side requests without tools plainly, whatever the prompt says', async () => {
    stub = await startModelStub();
    const events = await sse(
      await post(`${stub.url}/v1/messages`, { stream: true, messages: [{ role: 'user', content: stubPrompt({ slow: { ms: 30_000 } }) }] }),
    );
    expect(events.find((e) => e.event === 'content_block_delta')!.data.delta.text).toBe('ok');
    expect(stub.requests[0]!.reply).toBe('text');
  });
});
