import { AgentctlErrorResponse, AgentctlRoutes, AgentctlStatusResponse } from '@kandev/contracts/agentctl';
import { randomUUID } from 'node:crypto';
import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { authorized } from '../src/http.js';
import { MAIN, TEST_SECRET, isAlive, killAll, script, startAgentctl } from './harness.js';

afterEach(killAll);

/** A body each route would accept: a refusal must come from the missing secret, never from validation. */
const bodies: Record<string, unknown> = {
  '/api/v1/acp/prompt': { prompt: 'hello', turn_id: 'intruder-turn' },
  '/api/v1/acp/cancel': {},
  '/api/v1/acp/permission': { request_id: 'r', option_id: 'o' },
  '/api/v1/stop': { grace_ms: 1 },
};

describe('agentctl answers only the holder of its execution secret (R-9.2)', () => {
  it('compares the bearer token exactly', () => {
    expect(authorized(`Bearer ${TEST_SECRET}`, TEST_SECRET)).toBe(true);
    expect(authorized(undefined, TEST_SECRET)).toBe(false);
    expect(authorized(TEST_SECRET, TEST_SECRET)).toBe(false);
    expect(authorized(`Bearer ${TEST_SECRET}x`, TEST_SECRET)).toBe(false);
    expect(authorized(`Bearer ${TEST_SECRET.slice(1)}`, TEST_SECRET)).toBe(false);
    expect(authorized('Bearer ', TEST_SECRET)).toBe(false);
    expect(authorized(`Basic ${TEST_SECRET}`, TEST_SECRET)).toBe(false);
  });

  it('401 on every route but /healthz without the secret or with another one, and nothing changes', async () => {
    const ctl = await startAgentctl('scripted-acp');
    const turnId = randomUUID();
    await ctl.prompt(script([{ sleep_ms: 60_000 }]), turnId);
    const before = AgentctlStatusResponse.parse((await ctl.http('GET', '/api/v1/status')).body);
    expect(before).toMatchObject({ state: 'running', turn_id: turnId });

    const credentials: Array<[string, Record<string, string>]> = [
      ['no header', { authorization: '' }],
      ['another secret', { authorization: 'Bearer another-execution-secret-0123456789' }],
      ['the secret without Bearer', { authorization: TEST_SECRET }],
    ];
    for (const route of AgentctlRoutes) {
      for (const [label, headers] of credentials) {
        const reply = await ctl.http(route.method, route.path, route.method === 'POST' ? bodies[route.path] : undefined, headers);
        if (!route.authenticated) {
          expect(reply.status, `${route.method} ${route.path} (${label})`).toBe(200);
          continue;
        }
        expect(reply.status, `${route.method} ${route.path} (${label})`).toBe(401);
        expect(AgentctlErrorResponse.parse(reply.body).error.code).toBe('UNAUTHORIZED');
      }
    }
    // An unknown path says nothing either (no 404 that would map the API).
    expect((await ctl.http('GET', '/api/v1/nope', undefined, { authorization: '' })).status).toBe(401);

    const after = AgentctlStatusResponse.parse((await ctl.http('GET', '/api/v1/status')).body);
    expect(after).toMatchObject({ state: 'running', turn_id: turnId });
    expect(isAlive(ctl.agentPid)).toBe(true);
    expect(ctl.events.filter((e) => e.type === 'turn_completed')).toEqual([]);
  });

  it('refuses to start without a secret', async () => {
    const { AGENTCTL_SECRET: _drop, ...env } = process.env;
    const child = spawn(process.execPath, [MAIN, '--agent', 'scripted-acp'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
    expect(code).toBe(2);
    expect(stderr).toMatch(/execution secret/);
  });

  it('reads the secret from an inherited descriptor and closes it', async () => {
    const secret = 'fd-delivered-secret-0123456789abcdef';
    const ctl = await startAgentctl('scripted-acp', ['--secret-fd', '3'], { AGENTCTL_SECRET: '' }, secret);
    expect((await ctl.http('GET', '/api/v1/status', undefined, { authorization: `Bearer ${secret}` })).status).toBe(200);
    expect((await ctl.http('GET', '/api/v1/status')).status).toBe(401);
  });
});
