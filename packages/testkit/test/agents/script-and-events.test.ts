import { appendFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createAgentEventSink, readAgentEvents, waitForAgentEvent } from '../../src/agents/events.js';
import { parsePrompt } from '../../src/agents/script.js';

describe('parsePrompt', () => {
  it('echoes anything that is not a script', () => {
    expect(parsePrompt('hello')).toEqual({ kind: 'echo', text: 'hello' });
    expect(parsePrompt('42')).toEqual({ kind: 'echo', text: '42' });
    expect(parsePrompt('{"say":"x"}')).toEqual({ kind: 'echo', text: '{"say":"x"}' });
  });

  it('parses scripts with their flags', () => {
    const parsed = parsePrompt(JSON.stringify({ script: [{ sleep_ms: 5 }, { say: 'hi' }, { mcp: { tool: 'echo' } }], ignore_cancel: true }));
    expect(parsed).toEqual({
      kind: 'script',
      script: { script: [{ sleep_ms: 5 }, { say: 'hi' }, { mcp: { tool: 'echo', args: {} } }], ignore_cancel: true, ignore_sigterm: false },
    });
  });

  it('reports a malformed script instead of guessing', () => {
    expect(parsePrompt(JSON.stringify({ script: [{ sleep_ms: -1 }] })).kind).toBe('invalid');
  });
});

describe('agent events file', () => {
  it('writes sub-millisecond timestamps and reads back only complete lines', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'agent-events-')), 'events.jsonl');
    expect(readAgentEvents(file)).toEqual([]);
    const sink = createAgentEventSink('scripted-acp', file);
    const before = performance.timeOrigin + performance.now();
    sink('recv', { method: 'session/cancel' });
    appendFileSync(file, '{"t": 1, "kind": "re'); // a line still being written
    const events = readAgentEvents(file);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ kind: 'recv', method: 'session/cancel', agent: 'scripted-acp', pid: process.pid });
    expect(events[0]?.t).toBeGreaterThanOrEqual(before);
    await expect(waitForAgentEvent(file, (e) => e.kind === 'sigterm', { timeoutMs: 50 })).rejects.toThrow(/no matching agent event/);
  });

  it('is a no-op without a file', () => {
    expect(() => createAgentEventSink('scripted-codex', undefined)('prompt', { text: 'x' })).not.toThrow();
  });
});
