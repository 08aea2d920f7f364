import { AgentctlErrorResponse } from '@kandev/contracts/agentctl';
import { afterEach, describe, expect, it } from 'vitest';
import { killAll, startAgentctl, waitUntil, type ScriptedAgent } from './harness.js';

afterEach(killAll);

describe('agentctl HTTP surface', () => {
  it('validates bodies, rejects non-JSON and unknown routes, and accepts a traceparent', async () => {
    const ctl = await startAgentctl('scripted-acp');
    const missing = await ctl.http('POST', '/api/v1/acp/prompt', {});
    expect(missing.status).toBe(400);
    expect(AgentctlErrorResponse.parse(missing.body).error.code).toBe('VALIDATION_ERROR');
    const garbage = await ctl.http('POST', '/api/v1/acp/cancel', 'not json{');
    expect(garbage.status).toBe(400);
    expect(AgentctlErrorResponse.parse(garbage.body).error.code).toBe('BAD_REQUEST');
    const huge = await ctl.http('POST', '/api/v1/acp/cancel', JSON.stringify({ turn_id: 'x'.repeat(1024 * 1024) }));
    expect(huge.status).toBe(400);
    expect(AgentctlErrorResponse.parse(huge.body).error.message).toMatch(/larger than 1048576 bytes/);
    const unknown = await ctl.http('GET', '/api/v1/nope');
    expect(unknown.status).toBe(404);
    const traced = await ctl.http('GET', '/api/v1/status', undefined, { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' });
    expect(traced.status).toBe(200);
    // A prompt without turn_id gets one minted.
    const minted = await ctl.http('POST', '/api/v1/acp/prompt', { prompt: 'hi' });
    expect(minted.status).toBe(202);
    expect(minted.body).toEqual({ turn_id: expect.any(String) });
    // A stopped agent takes no prompts.
    await ctl.waitForEvent('turn_completed');
    await ctl.http('POST', '/api/v1/stop', { grace_ms: 500 });
    await ctl.exited;
  });

  it('fails fast on bad configuration', async () => {
    await expect(startAgentctl('scripted-acp', ['--port', 'abc'])).rejects.toThrow(/exited \(2\)/);
    await expect(startAgentctl('nope' as ScriptedAgent)).rejects.toThrow(/unknown agent .*nope/);
  });

  it('is ready quickly and keeps stdout pure', async () => {
    const started = performance.now();
    const ctl = await startAgentctl('scripted-codex');
    expect(performance.now() - started).toBeLessThan(10_000);
    await waitUntil(() => ctl.stderr().includes('"msg":"ready"'), 2000, 'ready log');
    expect(ctl.badLines).toEqual([]);
  });
});
