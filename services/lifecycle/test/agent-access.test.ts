import type { NatsConnection, RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultAgentctlBin } from '../src/agentctl/process.js';
import { agentAccessProblems, agentTargets, describeProblem, preflight, resolveCommand, type StatLike } from '../src/isolation/agent-access.js';
import { EventLog, FakeOrchestrator, launch, launchRequest, natsClient, startLifecycle, stopAt } from './helpers.js';

/*
 * R-10.6 (issue 54, "a private state directory breaks every launch, silently"): what agent uids
 * cannot reach is refused at start-up, in words naming the directory and the fix.
 */

/** A fake filesystem: path → [mode, kind]. */
function fakeFs(entries: Record<string, [number, 'd' | 'f']>): (p: string) => StatLike | null {
  return (p) => {
    const e = entries[p];
    return e ? { mode: e[0], isDirectory: () => e[1] === 'd', isFile: () => e[1] === 'f' } : null;
  };
}

describe('what agent uids must reach (pure rules)', () => {
  const fs = fakeFs({
    '/': [0o755, 'd'],
    '/root': [0o700, 'd'],
    '/root/kandev': [0o755, 'd'],
    '/root/kandev/agentctl.js': [0o644, 'f'],
    '/srv': [0o755, 'd'],
    '/srv/state': [0o700, 'd'],
    '/srv/state/work': [0o711, 'd'],
    '/srv/private.js': [0o600, 'f'],
    '/usr': [0o755, 'd'],
    '/usr/bin': [0o755, 'd'],
    '/usr/bin/node': [0o755, 'f'],
    '/usr/bin/tool': [0o755, 'f'],
    '/root/bin': [0o755, 'd'],
    '/root/bin/tool': [0o755, 'f'],
  });

  it('every directory on the way needs o+x; a file to read o+r; a directory to enter o+x', () => {
    const t = (path: string, need: 'enter' | 'read' | 'exec') => ({ path, need, what: 'X', instead: 'move it' });
    const problems = agentAccessProblems(
      [t('/root/kandev/agentctl.js', 'read'), t('/srv/private.js', 'read'), t('/srv/state/work', 'enter'), t('/usr/bin/node', 'exec')],
      {
        stat: fs,
      },
    );
    expect(problems.map((p) => [p.target.path, p.blocked, p.mode])).toEqual([
      ['/root/kandev/agentctl.js', '/root', 0o700],
      ['/srv/private.js', '/srv/private.js', 0o600],
      ['/srv/state/work', '/srv/state', 0o700],
    ]);
    // A directory lifecycle makes traversable itself (its state directory) is not a problem.
    expect(agentAccessProblems([t('/srv/state/work', 'enter')], { stat: fs, fixable: (d) => d === '/srv/state' })).toEqual([]);
    // Missing: said so.
    expect(agentAccessProblems([t('/srv/nothing/here', 'enter')], { stat: fs })).toMatchObject([{ blocked: '/srv/nothing', mode: null }]);
  });

  it('says which directory, its mode, what it stops and the two fixes', () => {
    const [p] = agentAccessProblems([{ path: '/root/kandev/agentctl.js', need: 'read', what: 'the agentctl bundle', instead: 'move the clone' }], { stat: fs });
    expect(describeProblem(p!, '20000-29999')).toBe(
      'agent uids (20000-29999) cannot enter /root (mode 700) on the way to the agentctl bundle /root/kandev/agentctl.js: chmod o+x /root, or move the clone',
    );
  });

  it('finds a command where the agent would: the first PATH entry it can reach', () => {
    expect(resolveCommand('tool', '/root/bin:/usr/bin', fs)).toBe('/usr/bin/tool');
    expect(resolveCommand('tool', '/root/bin', fs)).toBe('/root/bin/tool');
    expect(resolveCommand('nope', '/root/bin:/usr/bin', fs)).toBeNull();
    expect(resolveCommand('/x/y', '/usr/bin', fs)).toBe('/x/y');
  });

  it('lists the state and work directories, Node, agentctl, the catalogue file and what each agent runs and reads', () => {
    const targets = agentTargets(
      {
        stateDir: '/srv/state',
        workRoot: '/srv/state/work',
        agentctlBin: '/root/kandev/agentctl.js',
        nodeBin: '/usr/bin/node',
        agents: [{ name: 'a', command: 'tool', args: ['/root/kandev/agentctl.js', '--flag', 'relative'] }],
        catalogueFile: '/srv/cat.json',
        PATH: '/root/bin:/usr/bin',
      },
      fs,
    );
    expect(targets.map((t) => `${t.need} ${t.path}`)).toEqual([
      'enter /srv/state',
      'enter /srv/state/work',
      'exec /usr/bin/node',
      'read /root/kandev/agentctl.js',
      'read /srv/cat.json',
      'exec /usr/bin/tool',
      'read /root/kandev/agentctl.js',
    ]);
  });
});

describe('lifecycle refuses to start where agents could not work (R-10.6)', { timeout: 120_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let events: EventLog;
  const dirs: string[] = [];
  const running: RunningService[] = [];

  beforeAll(async () => {
    if (process.getuid?.() !== 0) throw new Error('these tests need root: agents get uids of their own only then (run them as root, as CI does)');
    nats = await startNats();
    nc = await natsClient(nats.url, 'agent-access-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
  });
  afterAll(async () => {
    for (const r of running) await r.stop();
    await nc?.close();
    await nats?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  /** A `mktemp -d` directory: 0700, root's. */
  const privateDir = () => {
    const d = mkdtempSync(join(tmpdir(), 'kandev-private-'));
    dirs.push(d);
    return d;
  };

  it('a KANDEV_STATE_DIR inside a 0700 directory: refused, naming it; made enterable, a launch works', async () => {
    const parent = privateDir();
    const stateDir = join(parent, 'state');
    const refused = await startLifecycle(nats.url, 'life-access-1', stateDir).then(
      (r) => (running.push(r), null),
      (e: Error) => e.message,
    );
    expect(refused).toContain(`cannot enter ${parent} (mode 700) on the way to KANDEV_STATE_DIR ${stateDir}: chmod o+x ${parent}`);
    expect(refused).toContain('refusing to start');

    chmodSync(parent, 0o711);
    const life = await startLifecycle(nats.url, 'life-access-2', stateDir);
    running.push(life);
    const ready = (await (await fetch(`${life.healthUrl}/readyz`)).json()) as { details: Record<string, unknown> };
    expect(ready.details).toMatchObject({ agent_access: 'ok', agent_isolation: 'uid_per_execution' });
    const x = await launch(nc, launchRequest());
    expect(x.pid).toBeGreaterThan(0);
    await stopAt(nc, 'life-access-2', { execution_id: x.execution_id, reason: 'test' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
  });

  it('npm start says the same first, before anything starts, and exits 1', () => {
    const parent = privateDir();
    const start = fileURLToPath(new URL('../../../scripts/start.mjs', import.meta.url));
    const r = spawnSync(process.execPath, [start, '--no-build'], {
      env: { ...process.env, KANDEV_STATE_DIR: join(parent, 'state') },
      encoding: 'utf8',
      timeout: 30_000,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain(`[kandev] agents could not work here`);
    expect(r.stderr).toContain(`cannot enter ${parent} (mode 700) on the way to KANDEV_STATE_DIR ${join(parent, 'state')}: chmod o+x ${parent}`);
    // Refused before anything was made there.
    expect(readdirSync(parent)).toEqual([]);

    // A first start: the state directory does not exist yet (lifecycle makes it): no refusal.
    chmodSync(parent, 0o755);
    const first = { env: { PATH: process.env.PATH }, agentctlBin: defaultAgentctlBin(), agents: [], euid: 0 };
    expect(preflight({ ...first, stateDir: join(parent, 'state') })).toBeNull();
    expect(preflight({ ...first, stateDir: join(parent, 'state'), euid: 1000 })).toBeNull();
    chmodSync(parent, 0o700);
    expect(preflight({ ...first, stateDir: join(parent, 'state') })).toContain(`cannot enter ${parent} (mode 700)`);
    expect(preflight({ ...first, stateDir: join(parent, 'state'), env: { AGENT_ISOLATION: 'off' } })).toBeNull();
  });

  it('an agentctl bundle in a clone agents cannot enter (as under /root): refused, naming the directory', async () => {
    const clone = privateDir();
    mkdirSync(join(clone, 'dist'));
    const bin = join(clone, 'dist', 'agentctl.bundle.js');
    copyFileSync(defaultAgentctlBin(), bin);
    const stateDir = join(privateDir(), 'state');
    chmodSync(join(stateDir, '..'), 0o711);
    const refused = await startLifecycle(nats.url, 'life-access-3', stateDir, { AGENTCTL_BIN: bin }).then(
      (r) => (running.push(r), null),
      (e: Error) => e.message,
    );
    expect(refused).toContain(`cannot enter ${clone} (mode 700) on the way to the agentctl bundle ${bin}: chmod o+x ${clone}`);
  });
});
