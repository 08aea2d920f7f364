// `npm start` end to end: the real script, its own nats-server and embedded PostgreSQL, the five
// services as processes; the gateway gets ready; Ctrl-C (SIGINT) exits 0 and leaves no process
// behind. Expects a built tree (`npm test` builds first).
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { connectNats, verifyAgentToken, verifyOperatorToken } from '@kandev/runtime';
import { repoRoot } from '../src/paths.js';
import { readyz, runCleanups, startEnv, startStack, stoppedWithin, tempStateDir, sleep } from './start-harness.js';

afterAll(runCleanups);

describe('npm start', () => {
  it('starts NATS, PostgreSQL and every service, serves /readyz, and leaves no process behind on SIGINT', async () => {
    const started = Date.now();
    const s = await startStack('launcher');
    const { gateway } = s;
    const readyAfterMs = Date.now() - started;
    expect(await readyz(gateway, 30_000), `GET ${gateway}/readyz\n${s.out()}`).toBe(200);
    // The whole banner is out once the stack is ready.
    const stdout = s.out();

    // The banner's token is an operator token for every workspace, signed with the stored secret.
    const secret = readFileSync(join(s.stateDir, 'secret'), 'utf8').trim();
    // It is in <state>/operator-token, mode 0600, and not on stdout (a pipe here, not a terminal).
    const tokenFile = join(s.stateDir, 'operator-token');
    expect(stdout).toContain(tokenFile);
    expect(statSync(tokenFile).mode & 0o777).toBe(0o600);
    const token = readFileSync(tokenFile, 'utf8').trim();
    expect(stdout).not.toContain(token);
    expect(await verifyOperatorToken(secret, token)).toMatchObject({ sub: 'local-operator', workspaces: ['*'] });
    expect(stdout).toMatch(/Console:\s+http\S+\/ui\//);
    // The printed MCP URL is the live endpoint: it answers, and wants an agent token.
    const mcp = /^\s*MCP:\s+(http\S+)/m.exec(stdout)?.[1];
    expect(mcp, stdout).toMatch(/\/mcp$/);
    const mcpStatus = await fetch(mcp!, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }).then((r) => r.status);
    expect(mcpStatus).toBe(401);
    expect(stdout).toMatch(/Database:\s+postgres:\/\/kandev:\*\*\*\*@/);

    // The bus admits only the services (ADR 0054): an anonymous client is refused; a service's own
    // user (its password from the config npm start wrote) gets a permissions violation outside its list.
    const natsUrl = /^\s*NATS:\s+(nats:\/\/\S+)/m.exec(stdout)?.[1];
    expect(natsUrl, stdout).toBeDefined();
    const anonymous = await connectNats({ url: natsUrl!, name: 'anonymous' }).catch((e: unknown) => e);
    expect(String((anonymous as Error)?.message ?? anonymous)).toMatch(/authorization/i);
    const conf = readFileSync(join(s.stateDir, 'nats-auth/nats-server.conf'), 'utf8');
    expect(conf).toMatch(/include ".*deploy\/nats\/permissions\.conf"/);
    const holdsPass = /user: holds, password: "([^"]+)"/.exec(conf)?.[1];
    const holds = await connectNats({ url: natsUrl!, name: 'holds-creds', user: 'holds', pass: holdsPass! });
    try {
      const denied = await holds.request('kandev.life.lifecycle-1.exec.stop', new TextEncoder().encode('{}'), { timeout: 2_000 }).catch((e: unknown) => e);
      expect(String((denied as Error)?.message ?? denied)).toMatch(/permission/i);
      // Within its list: an answer from the holds service itself.
      expect((await holds.request('kandev.holds.ping', new TextEncoder().encode('{}'), { timeout: 5_000 })).data.length).toBeGreaterThan(0);
    } finally {
      await holds.close();
    }
    // Passwords and bus keys: readable by the control plane's user only.
    for (const [path, mode] of [
      ['nats-auth', 0o700],
      ['nats-auth/nats-server.conf', 0o600],
      ['bus-keys', 0o700],
      ['bus-keys/gateway.key', 0o600],
    ] as const)
      expect((statSync(join(s.stateDir, path)).mode & 0o777).toString(8), path).toBe(mode.toString(8));
    // Every service the gateway pings says how it is admitted and that callers are verified.
    const readyBody = (await (await fetch(`${gateway}/readyz`)).json()) as { details?: Record<string, Record<string, unknown>> };
    expect(Object.keys(readyBody.details ?? {}).sort(), JSON.stringify(readyBody)).toEqual(['holds', 'lifecycle', 'mcp', 'orchestrator']);
    for (const d of Object.values(readyBody.details!)) expect(d).toMatchObject({ nats_auth: 'user', bus_identity: 'verified' });

    // A running agent that ignores SIGTERM: Ctrl-C must still leave neither it nor its agentctl.
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(`${gateway}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await res.text();
      expect(res.status, `${method} ${path}: ${text}`).toBeLessThan(300);
      return JSON.parse(text) as Record<string, unknown>;
    };
    const workspace = await api('POST', '/workspaces', { name: 'npm-start-test' });
    const task = await api('POST', '/tasks', { workspace_id: workspace.id, title: 'long-running agent' });
    await api('POST', `/tasks/${task.id}/sessions`, { prompt: JSON.stringify({ script: [{ sleep_ms: 600_000 }], ignore_sigterm: true }) });
    let agentPid: number | null = null;
    for (const deadline = Date.now() + 20_000; agentPid === null && Date.now() < deadline; await sleep(200)) {
      const execs = (await fetch(`${gateway}/tasks/${task.id}/executions`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.json())) as Array<{
        pid: number | null;
        status: string;
      }>;
      agentPid = execs.find((e) => e.status === 'RUNNING' && e.pid)?.pid ?? null;
    }
    expect(agentPid, 'the agent never ran').not.toBeNull();

    s.sample();
    expect(
      [...s.seen.values()].some((p) => p.pid === agentPid),
      'agent is a descendant of npm start',
    ).toBe(true);
    const cmds = [...s.seen.values()].map((p) => p.cmd);
    expect(
      cmds.some((c) => /nats-server/.test(c)),
      cmds.join('\n'),
    ).toBe(true);
    expect(
      cmds.some((c) => /bin\/postgres/.test(c)),
      cmds.join('\n'),
    ).toBe(true);
    for (const svc of ['orchestrator', 'holds', 'lifecycle', 'mcp', 'gateway']) {
      expect(
        cmds.some((c) => c.includes(`services/${svc}/dist/${svc}.bundle.js`)),
        `${svc} process`,
      ).toBe(true);
    }

    const stopAt = Date.now();
    s.child.kill('SIGINT');
    const exit = await stoppedWithin(s, 45_000);
    expect(exit, `start.mjs did not exit within 45 s of SIGINT\n${s.out()}`).not.toBeNull();
    expect(exit, s.out()).toEqual({ code: 0, signal: null });
    expect(
      (await s.survivors()).map((p) => `${p.pid} ${p.cmd}`),
      `processes left behind\n${s.out()}`,
    ).toEqual([]);

    console.info(`npm start: gateway URL after ${readyAfterMs} ms; stopped ${Date.now() - stopAt} ms after SIGINT; ${s.seen.size} processes`);
  }, 120_000);
});

describe('npm run token', () => {
  const run = (args: string[], env: Record<string, string>) =>
    spawnSync(process.execPath, ['scripts/token.mjs', ...args], { cwd: repoRoot, env: startEnv(env), encoding: 'utf8' });

  it('signs operator and agent tokens with the secret npm start stored', async () => {
    const state = tempStateDir();
    // Two keys (ADR 0020): the operator key in `secret`, the agent key in `agent-secret`.
    const secret = 'a-secret-of-at-least-sixteen-chars';
    const agentKey = 'an-agent-key-of-at-least-sixteen-chars';
    mkdirSync(state, { recursive: true });
    writeFileSync(join(state, 'secret'), secret + '\n');
    writeFileSync(join(state, 'agent-secret'), agentKey + '\n');

    const all = run(['operator'], { KANDEV_STATE_DIR: state });
    expect(all.status, all.stderr).toBe(0);
    expect(all.stdout.trim().split('\n')).toHaveLength(1);
    expect(await verifyOperatorToken(secret, all.stdout.trim())).toMatchObject({ workspaces: ['*'] });

    const two = run(['operator', '--workspace', 'w1', '--workspace=w2'], { KANDEV_STATE_DIR: state });
    expect(await verifyOperatorToken(secret, two.stdout.trim())).toMatchObject({ workspaces: ['w1', 'w2'] });

    const task = '3f1c2a7e-1234-4abc-8def-0123456789ab';
    const session = '9b2d4c6e-5678-4def-9abc-abcdef012345';
    const agent = run(['agent', '--task', task, '--session', session, '--mode', 'office'], { KANDEV_STATE_DIR: state });
    expect(agent.status, agent.stderr).toBe(0);
    expect(await verifyAgentToken(agentKey, agent.stdout.trim())).toMatchObject({ task_id: task, session_id: session, mode: 'office' });
    // Each kind with its own key only.
    await expect(verifyAgentToken(secret, agent.stdout.trim())).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    await expect(verifyOperatorToken(agentKey, all.stdout.trim())).rejects.toMatchObject({ code: 'UNAUTHORIZED' });

    // KANDEV_JWT_SECRET wins over the stored secret.
    const fromEnv = run(['operator'], { KANDEV_STATE_DIR: state, KANDEV_JWT_SECRET: 'another-secret-sixteen-plus' });
    expect(await verifyOperatorToken('another-secret-sixteen-plus', fromEnv.stdout.trim())).toMatchObject({ sub: 'local-operator' });
    // A key's own variable wins over KANDEV_JWT_SECRET.
    const own = run(['agent', '--task', task], {
      KANDEV_STATE_DIR: state,
      KANDEV_JWT_SECRET: 'another-secret-sixteen-plus',
      KANDEV_AGENT_JWT_SECRET: 'the-agent-key-sixteen-plus',
    });
    expect(await verifyAgentToken('the-agent-key-sixteen-plus', own.stdout.trim())).toMatchObject({ task_id: task });
  });

  it('fails clearly without a secret or with bad arguments', () => {
    const state = tempStateDir();
    const none = run(['operator'], { KANDEV_STATE_DIR: state });
    expect(none.status).toBe(1);
    expect(none.stdout).toBe('');
    expect(none.stderr).toMatch(/KANDEV_OPERATOR_JWT_SECRET \(or KANDEV_JWT_SECRET\)/);

    const secretEnv = { KANDEV_STATE_DIR: state, KANDEV_JWT_SECRET: 'a-secret-of-at-least-sixteen-chars' };
    expect(run(['agent'], secretEnv).stderr).toMatch(/--task/);
    expect(run(['agent', '--task', 'not-a-uuid'], secretEnv).status).toBe(2);
    expect(run(['agent', '--task', '3f1c2a7e-1234-4abc-8def-0123456789ab', '--mode', 'boss'], secretEnv).stderr).toMatch(/--mode/);
    expect(run(['admin'], secretEnv).status).toBe(2);
    // A key no service would start with is refused here too (packages/runtime/src/keys.ts).
    const placeholder = run(['operator'], { KANDEV_STATE_DIR: state, KANDEV_JWT_SECRET: 'change-me-at-least-32-random-bytes' });
    expect([placeholder.status, placeholder.stdout]).toEqual([1, '']);
    expect(placeholder.stderr).toMatch(/placeholder/);
  });
});
