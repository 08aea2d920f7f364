import { AgentctlRoutes, type Execution } from '@kandev/contracts';
import type { NatsConnection, RunningService } from '@kandev/runtime';
import { probeAs, startNats, type TestNats } from '@kandev/testkit';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EventLog,
  FakeOrchestrator,
  eventually,
  launch,
  launchRequest,
  natsClient,
  processGone,
  promptAt,
  script,
  startLifecycle,
  stopAt,
  tmpStateDir,
} from './helpers.js';

/*
 * against the real thing: this machine's tests run as root, so lifecycle gives every
 * execution a uid of its own. A small range (two uids) makes reuse observable.
 */

const RANGE = { first: 29_990, last: 29_991 };
const uidOf = (pid: number): number => Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
const ppidOf = (pid: number): number => Number(/^PPid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
const environOf = (pid: number): Record<string, string> =>
  Object.fromEntries(
    readFileSync(`/proc/${pid}/environ`, 'utf8')
      .split('\0')
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );

describe('agents are untrusted: a uid, a directory and a secret per execution (R-9.1, R-9.2)', { timeout: 120_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  let events: EventLog;
  const stateDir = tmpStateDir();
  const workRoot = join(stateDir, 'work');
  const holders: ChildProcess[] = [];

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'isolation-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    life = await startLifecycle(nats.url, 'life-iso', stateDir, { AGENT_UID_RANGE: `${RANGE.first}-${RANGE.last}` });
  });
  afterAll(async () => {
    for (const h of holders) h.kill('SIGKILL');
    await life?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('runs each agent under a uid of its own, in its task directory, with a minimal environment; another uid reaches none of it', async () => {
    const [a, b] = await Promise.all([launch(nc, launchRequest()), launch(nc, launchRequest())]);
    const me = process.getuid!();
    const [uidA, uidB] = [uidOf(a.pid!), uidOf(b.pid!)];
    for (const u of [uidA, uidB]) (expect(u).toBeGreaterThanOrEqual(RANGE.first), expect(u).toBeLessThanOrEqual(RANGE.last));
    expect(uidA).not.toBe(me);
    expect(uidA).not.toBe(uidB);
    // agentctl runs under the agent's uid too (it is the agent's parent).
    expect(uidOf(a.agentctl_pid!)).toBe(uidA);
    expect(ppidOf(a.pid!)).toBe(a.agentctl_pid);

    const dirA = join(workRoot, a.workspace_id, a.task_id);
    const dirB = join(workRoot, b.workspace_id, b.task_id);
    expect(readlinkSync(`/proc/${a.pid}/cwd`)).toBe(dirA);
    expect(readlinkSync(`/proc/${b.pid}/cwd`)).toBe(dirB);
    expect(statSync(dirA)).toMatchObject({ uid: uidA, gid: uidA });
    expect(statSync(dirA).mode & 0o777).toBe(0o700);
    // lifecycle's own state is root's alone.
    expect(statSync(join(stateDir, 'lifecycle')).mode & 0o777).toBe(0o700);

    const envA = environOf(a.pid!);
    expect(envA.HOME).toBe(join(workRoot, '.homes', a.workspace_id, a.task_id));
    expect(statSync(envA.HOME!).uid).toBe(uidA);
    for (const secret of ['KANDEV_JWT_SECRET', 'AGENTCTL_MCP_TOKEN', 'AGENTCTL_SECRET', 'NATS_URL', 'DATABASE_URL', 'INSTANCE_ID', 'KANDEV_STATE_DIR'])
      expect(envA[secret], secret).toBeUndefined();
    // agentctl's own environment never held the execution secret either (it came on a pipe).
    expect(Object.keys(environOf(a.agentctl_pid!))).not.toContain('AGENTCTL_SECRET');
    // Executions' ids are out of argv (/proc/<pid>/cmdline is every uid's to read, issue 53): in
    // agentctl's environment (its uid's alone), and not in its agent's.
    for (const x of [a, b]) {
      const ids = [x.execution_id, x.session_id, x.task_id, x.workspace_id];
      for (const pid of [x.agentctl_pid!, x.pid!]) {
        const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
        for (const id of ids) expect(argv, `${pid} ${argv}`).not.toContain(id);
      }
      expect(environOf(x.agentctl_pid!)).toMatchObject({
        AGENTCTL_EXECUTION_ID: x.execution_id,
        AGENTCTL_TASK_ID: x.task_id,
        AGENTCTL_SESSION_ID: x.session_id,
      });
      expect(Object.keys(environOf(x.pid!)).filter((k) => k.startsWith('AGENTCTL_'))).toEqual([]);
    }
    // And another execution's uid cannot read agentctl's environment, where the ids are.
    expect(probeAs(uidB, [{ op: 'read', target: `/proc/${a.agentctl_pid}/environ` }])).toEqual(['EACCES']);

    const results = probeAs(uidA, [
      { op: 'read', target: `/proc/${process.pid}/environ` },
      { op: 'read', target: `/proc/${b.pid}/environ` },
      { op: 'read', target: `/proc/${b.agentctl_pid}/environ` },
      { op: 'readdir', target: dirB },
      { op: 'readdir', target: join(stateDir, 'lifecycle') },
      { op: 'readdir', target: workRoot },
      { op: 'signal', target: b.pid! },
      { op: 'signal', target: b.agentctl_pid! },
      { op: 'signal', target: process.pid },
      // Its own: reachable.
      { op: 'readdir', target: dirA },
      { op: 'signal', target: a.pid! },
    ]);
    expect(results).toEqual(['EACCES', 'EACCES', 'EACCES', 'EACCES', 'EACCES', 'EACCES', 'EPERM', 'EPERM', 'EPERM', 'ok', 'ok']);

    await Promise.all([
      stopAt(nc, 'life-iso', { execution_id: a.execution_id, reason: 'test' }),
      stopAt(nc, 'life-iso', { execution_id: b.execution_id, reason: 'test' }),
    ]);
    await eventually(
      () => [a.pid!, b.pid!, a.agentctl_pid!, b.agentctl_pid!].every(processGone),
      (gone) => gone,
      15_000,
    );
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === b.execution_id);
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === a.execution_id);
    // Finished: the directory is handed back to root, so a later holder of the uid reaches nothing.
    expect(statSync(dirA).uid).toBe(0);
  });

  it("refuses every agentctl route without the execution's secret, and nothing changes", async () => {
    const x = await launch(nc, launchRequest());
    const turnId = randomUUID();
    await promptAt(nc, 'life-iso', { execution_id: x.execution_id, turn_id: turnId, prompt: script([{ sleep_ms: 60_000 }]) });
    await events.waitFor('turn.started', (e) => e.data.turn_id === turnId);
    const url = (await eventually(
      async () => (await import('./helpers.js')).getExecution(nc, x.execution_id),
      (r) => r !== null && r.agentctl_url !== null,
    ))!.agentctl_url!;

    for (const route of AgentctlRoutes) {
      for (const authorization of [undefined, `Bearer ${'x'.repeat(43)}`, 'Bearer ']) {
        const res = await fetch(new URL(route.path, url), {
          method: route.method,
          headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
          ...(route.method === 'POST'
            ? { body: JSON.stringify(route.path.endsWith('prompt') ? { prompt: 'hijack' } : route.path.endsWith('stop') ? { grace_ms: 1 } : {}) }
            : {}),
        });
        expect(res.status, `${route.method} ${route.path} ${authorization ?? '(none)'}`).toBe(route.authenticated ? 401 : 200);
      }
    }
    const entry = (await (await import('./helpers.js')).getExecution(nc, x.execution_id)) as Execution;
    expect(entry).toMatchObject({ status: 'RUNNING', turn_id: turnId });
    expect(processGone(x.pid!)).toBe(false);
    expect(events.of('turn.completed', x.execution_id)).toEqual([]);
    await stopAt(nc, 'life-iso', { execution_id: x.execution_id, reason: 'test' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
  });

  it('gives no uid out while any process holds it: not an outside holder, not an orphan that ignores SIGTERM until the teardown kills it', async () => {
    // An outside process holds the first uid of the range: every launch gets the other one.
    const holder = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1 << 30)'], { uid: RANGE.first, gid: RANGE.first, stdio: 'ignore', cwd: '/' });
    holders.push(holder);
    await eventually(() => holder.pid !== undefined && uidOf(holder.pid) === RANGE.first, Boolean);

    const a = await launch(nc, launchRequest());
    expect(uidOf(a.pid!)).toBe(RANGE.last);
    // Both uids taken: the next launch is refused (UNAVAILABLE), with nothing left behind.
    const refused = launchRequest();
    await expect(launch(nc, refused)).rejects.toMatchObject({ code: 'UNAVAILABLE' });

    // a's agent leaves a process behind that ignores SIGTERM and is no longer in its tree.
    const turnId = randomUUID();
    await promptAt(nc, 'life-iso', { execution_id: a.execution_id, turn_id: turnId, prompt: script([{ orphan: { ignore_sigterm: true } }]) });
    await events.waitFor('turn.completed', (e) => e.data.turn_id === turnId);
    const said = events
      .of('agent.message', a.execution_id)
      .map((e) => e.data.text)
      .join('');
    const orphanPid = Number(/orphan (\d+)/.exec(said)![1]);
    expect(uidOf(orphanPid)).toBe(RANGE.last);
    expect(ppidOf(orphanPid)).not.toBe(a.pid);

    await stopAt(nc, 'life-iso', { execution_id: a.execution_id, reason: 'test', grace_ms: 200 });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === a.execution_id);
    // The teardown reached it through its uid.
    expect(processGone(orphanPid)).toBe(true);

    // Its uid is free again; the held one still is not.
    const c = await launch(nc, launchRequest());
    expect(uidOf(c.pid!)).toBe(RANGE.last);
    holder.kill('SIGKILL');
    await eventually(() => processGone(holder.pid!), Boolean);
    const d = await launch(nc, launchRequest());
    expect(uidOf(d.pid!)).toBe(RANGE.first);
    for (const x of [c, d]) await stopAt(nc, 'life-iso', { execution_id: x.execution_id, reason: 'test' });
    for (const x of [c, d]) await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);
  });

  it('runs a task in its working_dir, and refuses one outside KANDEV_WORK_DIR before anything starts', async () => {
    const ws = randomUUID();
    const dir = join(workRoot, ws, 'repos', 'one');
    const x = await launch(nc, launchRequest({ workspace_id: ws, working_dir: dir }));
    expect(readlinkSync(`/proc/${x.pid}/cwd`)).toBe(dir);
    await stopAt(nc, 'life-iso', { execution_id: x.execution_id, reason: 'test' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === x.execution_id);

    const outside = launchRequest({ workspace_id: ws, working_dir: '/etc' });
    await expect(launch(nc, outside)).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
    expect(events.of('execution.registered', outside.execution_id)).toEqual([]);

    // Through a symbolic link (an agent of the workspace may have left one; ADR 0056): refused at
    // the launch, by descriptor, and the root-only file behind it keeps its owner.
    const secrets = join(stateDir, 'secrets');
    mkdirSync(secrets, { mode: 0o700 });
    writeFileSync(join(secrets, 'canary'), 'root only', { mode: 0o600 });
    symlinkSync(secrets, join(workRoot, ws, 'evil'));
    for (const wd of [join(workRoot, ws, 'evil'), join(workRoot, ws, 'evil', 'below')]) {
      const viaLink = launchRequest({ workspace_id: ws, working_dir: wd });
      await expect(launch(nc, viaLink)).rejects.toMatchObject({ code: 'VALIDATION_ERROR' });
      expect(events.of('execution.registered', viaLink.execution_id)).toEqual([]);
    }
    expect(statSync(secrets)).toMatchObject({ uid: 0, gid: 0 });
    expect(statSync(join(secrets, 'canary'))).toMatchObject({ uid: 0, gid: 0 });
    expect(readdirSync(secrets)).toEqual(['canary']);
  });
});
