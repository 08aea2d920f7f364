import postgres from 'postgres';
import { readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { eventually, probeAs, processAlive, procStat } from '@kandev/testkit';
import { makeTask, sleepScript, sharedWorld, type SharedWorld } from './support.js';

/*
 * end to end, as `npm start` runs it (this machine's tests run as root, so isolation is on):
 * each agent runs under a uid of its own in its task's directory, and a process with that uid
 * reaches neither lifecycle's environment nor another execution's environment, directory or process.
 */

const uidOf = (pid: number): number => Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

it('says agents are isolated in /readyz', async () => {
  const ready = await w.api.get('/readyz');
  expect(ready.status).toBe(200);
  expect(ready.body.details).toMatchObject({ lifecycle: { agent_isolation: 'uid_per_execution' } });
});

it("runs each agent under its own uid in its task's directory; that uid reaches nothing of lifecycle or another execution", async () => {
  const [one, two] = await Promise.all([makeTask(w.api), makeTask(w.api)]);
  const [s1, s2] = await Promise.all([one, two].map(({ task }) => w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) })));
  const [x1, x2] = await Promise.all([s1, s2].map((s) => eventually(async () => (await w.api.get(`/sessions/${s.id}`)).body.execution)));
  const lifecyclePid = w.stack.services.get('lifecycle')!.pid;
  const lifecycleUid = uidOf(lifecyclePid);
  const [u1, u2] = [uidOf(x1.pid), uidOf(x2.pid)];
  expect(u1).not.toBe(lifecycleUid);
  expect(u2).not.toBe(lifecycleUid);
  expect(u1).not.toBe(u2);

  const work = join(w.stack.stateDir, 'work');
  const dir1 = join(work, one.workspace_id, one.task.id);
  const dir2 = join(work, two.workspace_id, two.task.id);
  expect(readlinkSync(`/proc/${x1.pid}/cwd`)).toBe(dir1);
  expect(readlinkSync(`/proc/${x2.pid}/cwd`)).toBe(dir2);
  expect(statSync(dir1).uid).toBe(u1);

  const agentctl2 = procStat(x2.pid)!.ppid;
  expect(
    probeAs(u1, [
      { op: 'read', target: `/proc/${lifecyclePid}/environ` },
      { op: 'read', target: `/proc/${x2.pid}/environ` },
      { op: 'read', target: `/proc/${agentctl2}/environ` },
      { op: 'readdir', target: dir2 },
      { op: 'readdir', target: join(w.stack.stateDir, 'lifecycle') },
      { op: 'signal', target: x2.pid },
      { op: 'signal', target: agentctl2 },
      { op: 'signal', target: lifecyclePid },
    ]),
  ).toEqual(['EACCES', 'EACCES', 'EACCES', 'EACCES', 'EACCES', 'EPERM', 'EPERM', 'EPERM']);

  for (const { task } of [one, two]) expect((await w.api.post(`/tasks/${task.id}/stop`)).status).toBe(200);
  await eventually(async () => !processAlive(x1.pid) && !processAlive(x2.pid), 15_000);
  // A stopped task's directory stays (a resume continues in it), handed back to root.
  await eventually(async () => statSync(dir1).uid === 0, 10_000);
});

it('runs a task in its working_dir, and refuses one outside KANDEV_WORK_DIR with VALIDATION_ERROR', async () => {
  const workspace_id = (await w.api.ok('POST', '/workspaces', { name: 'dirs' })).id;
  const work = join(w.stack.stateDir, 'work');
  // Outside any workspace's directory (shared between workspaces) is refused too (ADR 0056).
  for (const bad of ['/etc', join(w.stack.stateDir, 'lifecycle'), `${work}/../lifecycle`, 'relative/dir', work, join(work, 'repos', 'kandev')]) {
    const res = await w.api.post('/tasks', { workspace_id, title: 'escape', working_dir: bad });
    expect(res.status, bad).toBe(400);
    expect(res.body.error.code).toBe('VALIDATION_ERROR');
  }
  // Nothing was written.
  const sql = postgres(w.stack.db.url, { max: 1, onnotice: () => undefined });
  const [{ count }] = await sql<[{ count: number }]>`SELECT count(*)::int AS count FROM orchestrator.tasks WHERE workspace_id = ${workspace_id}`;
  await sql.end();
  expect(count).toBe(0);

  const dir = join(work, workspace_id, 'repos', 'kandev');
  const task = await w.api.ok('POST', '/tasks', { workspace_id, title: 'in a repo', working_dir: dir });
  expect(task.working_dir).toBe(dir);
  expect((await w.api.get(`/tasks/${task.id}`)).body.working_dir).toBe(dir);
  const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(60_000) });
  const x = await eventually(async () => (await w.api.get(`/sessions/${session.id}`)).body.execution);
  expect(readlinkSync(`/proc/${x.pid}/cwd`)).toBe(dir);
  expect((await w.api.post(`/tasks/${task.id}/stop`)).status).toBe(200);
  await eventually(async () => !processAlive(x.pid), 15_000);
});
