import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import { makeTask, sharedWorld, sleepScript, type SharedWorld } from './support.js';

/**
 * The `kandev` command-line client (R-12.3, INTERFACES.md "command-line client") as a script runs it:
 * the built bin as its own process against the shared stack, reading KANDEV_URL and KANDEV_TOKEN,
 * judged by its exit code, its output and the state the HTTP API reports afterwards.
 */
const BIN = fileURLToPath(new URL('../../packages/cli/dist/main.js', import.meta.url));
let w: SharedWorld;
beforeAll(async () => {
  w = await sharedWorld();
});
afterAll(async () => w?.stop());

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}
function kandev(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { env: { PATH: process.env.PATH ?? '', KANDEV_URL: w.stack.gatewayUrl, KANDEV_TOKEN: w.token, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr }),
    );
  });
}
const ok = async (args: string[]) => {
  const r = await kandev(args);
  expect(r, r.stderr).toMatchObject({ code: 0 });
  return r;
};

describe('kandev CLI', () => {
  it('lists workspaces and tasks as tables and as --json', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'cli root task' });
    const child = (await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'cli child task' })).task;

    const workspaces = JSON.parse((await ok(['workspaces', '--json', '--limit', '500'])).stdout);
    expect(workspaces.items.map((x: { id: string }) => x.id)).toContain(workspace_id);

    const table = (await ok(['tasks', 'ls', '--workspace', workspace_id])).stdout;
    expect(table.split('\n')[0]).toMatch(/^ID\s+STATUS\s+HOLD\s+CHILDREN\s+LIVE\s+TITLE$/);
    expect(table).toMatch(new RegExp(`${root.id}\\s+TODO\\s+1\\s+0\\s+cli root task`));
    expect(table).not.toContain('cli child task'); // roots only without --parent

    const children = JSON.parse((await ok(['tasks', 'ls', '--workspace', workspace_id, '--parent', root.id, '--json'])).stdout);
    expect(children.items.map((t: { id: string }) => t.id)).toEqual([child.id]);

    const shown = JSON.parse((await ok(['task', 'show', root.id, '--json'])).stdout);
    expect(shown).toMatchObject({ id: root.id, title: 'cli root task', sessions: [] });
  });

  it('pauses and resumes a tree, and a second pause is refused with exit 2 and the error code', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'cli tree' });
    await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'cli leaf' });

    const preview = JSON.parse((await ok(['tree', 'preview', root.id, '--json'])).stdout);
    expect(preview).toMatchObject({ task_count: 2, active_hold: null });

    const paused = await ok(['tree', 'pause', root.id, '--reason', 'cli check']);
    expect(paused.stdout).toMatch(/^pause: hold [0-9a-f-]{36} \(pause\) on .*, 2 members/);
    const listed = (await ok(['tasks', 'ls', '--workspace', workspace_id])).stdout;
    expect(listed).toMatch(new RegExp(`${root.id}\\s+TODO\\s+paused`));
    const [audit] = (await w.api.ok('GET', `/tasks/${root.id}/audit`)) as { action: string; reason: string | null }[];
    expect(audit).toMatchObject({ reason: 'cli check' });

    const again = await kandev(['tree', 'pause', root.id]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/refused: CONFLICT \(409\)/);
    expect(again.stdout).toBe('');

    const resumed = JSON.parse((await ok(['tree', 'resume', root.id, '--json'])).stdout);
    expect(resumed.hold.released_at).not.toBeNull();
    expect((await w.api.ok('POST', `/tasks/${root.id}/tree/preview`)).active_hold).toBeNull();
  });

  it('stops a running task, prompts and cancels a session; stopping what is not running is refused (2)', async () => {
    const { task } = await makeTask(w.api, { title: 'cli stop' });
    const s = await w.api.startSession(task.id, { prompt: 'hello from the test' });
    // The first turn echoes and ends: the session is idle, a prompt starts the next one.
    await eventually(async () => (await w.api.session(s.id)).state === 'WAITING_FOR_INPUT', 30_000);
    const prompted = JSON.parse((await ok(['session', 'prompt', s.id, sleepScript(60_000), '--json'])).stdout);
    expect(prompted.turn_id).toMatch(/^[0-9a-f-]{36}$/);
    await ok(['session', 'cancel', s.id, '--reason', 'cli cancel']);
    const detail = await w.api.session(s.id);
    expect(detail.turns.find((t) => t.id === prompted.turn_id)?.stop_reason).toBe('cancelled');

    const stopped = await ok(['task', 'stop', task.id]);
    expect(stopped.stdout).toMatch(new RegExp(`^stopped ${task.id}: 1 execution`));
    const again = await kandev(['task', 'stop', task.id, '--json']);
    expect(again.code).toBe(2);
    expect(JSON.parse(again.stdout).error.code).toBe('NOT_FOUND');
  });

  it("lists the inbox of a workspace, a child's question with its expiry too, as a table and as --json", async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'cli inbox root' });
    const child = (await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'cli inbox child' })).task;
    const empty = await ok(['inbox', '--workspace', workspace_id]);
    expect(empty.stdout).toBe('KIND  ID  TASK  SINCE  EXPIRES  TEXT\n');

    await w.api.startSession(child.id, { agent: 'scripted-acp', prompt: JSON.stringify({ script: [{ ask: [{ id: 'db', text: 'Which database?' }] }] }) });
    await w.api.startSession(root.id, { agent: 'scripted-acp', prompt: JSON.stringify({ script: [{ permission: 'Deploy to staging?' }] }) });
    await eventually(async () => (await w.api.ok('GET', `/inbox?workspace_id=${workspace_id}`)).items.length === 2, 30_000);

    const json = JSON.parse((await ok(['inbox', '--workspace', workspace_id, '--json'])).stdout);
    expect(json.truncated).toBe(false);
    const [question, permission] = json.items as { kind: string; id: string; task_id: string; ancestor_ids: string[]; expires_at: string | null }[];
    expect(question).toMatchObject({ kind: 'clarification', task_id: child.id, ancestor_ids: [root.id], text: 'Which database?' });
    expect(Date.parse(question!.expires_at!)).toBeGreaterThan(Date.now() - 5_000);
    expect(permission).toMatchObject({ kind: 'permission', task_id: root.id, ancestor_ids: [], expires_at: null, text: 'Deploy to staging?' });

    const lines = (await ok(['inbox', '--workspace', workspace_id])).stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^KIND\s+ID\s+TASK\s+SINCE\s+EXPIRES\s+TEXT$/);
    expect(lines.slice(1)).toEqual([
      expect.stringMatching(
        new RegExp(`^clarification\\s+${question!.id}\\s+cli inbox child\\s+\\S+\\s+${question!.expires_at!.replace(/[.+]/g, '\\$&')}\\s+Which database\\?$`),
      ),
      expect.stringMatching(new RegExp(`^permission\\s+${permission!.id}\\s+cli inbox root\\s+\\S+\\s+-\\s+Deploy to staging\\?$`)),
    ]);

    expect((await kandev(['inbox'])).code).toBe(1);
    const bad = await kandev(['inbox', '--workspace', 'not-a-uuid', '--json']);
    expect(bad.code).toBe(2);
    expect(JSON.parse(bad.stdout).error.code).toBe('VALIDATION_ERROR');
    expect(bad.stderr).toMatch(/refused: VALIDATION_ERROR \(400\)/);
    await w.api.post(`/tasks/${root.id}/stop`);
    await w.api.post(`/tasks/${child.id}/stop`);
  });

  it('sets, shows and clears a tree budget; a child, a missing budget and a bad amount are refused with their exit codes', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'cli budget root' });
    const child = (await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'cli budget child' })).task;

    const none = await kandev(['tree', 'budget', root.id, '--json']);
    expect(none.code).toBe(2);
    expect(JSON.parse(none.stdout).error.code).toBe('NOT_FOUND');

    const set = await ok(['tree', 'budget', root.id, '--set', '2500']);
    expect(set.stdout.trimEnd().split('\n')).toEqual([`task:    ${root.id}`, 'limit:   $25.00', 'spent:   $0.00', 'warn at: 80%', 'state:   ok', 'hold:    -']);
    const shown = JSON.parse((await ok(['tree', 'budget', root.id, '--json'])).stdout);
    expect(shown).toEqual({ task_id: root.id, limit_cents: 2500, warn_percent: 80, spent_cents: 0, state: 'ok', hold_id: null });
    expect(await w.api.ok('GET', `/tasks/${root.id}/tree/budget`)).toEqual(shown);

    const onChild = await kandev(['tree', 'budget', child.id, '--set', '100']);
    expect(onChild.code).toBe(2);
    expect(onChild.stderr).toMatch(/refused: VALIDATION_ERROR \(400\)/);
    for (const args of [
      ['tree', 'budget', root.id, '--set', 'lots'],
      ['tree', 'budget', root.id, '--set', '100', '--clear'],
      ['tree', 'budget'],
    ]) {
      const r = await kandev(args);
      expect({ args, code: r.code }).toEqual({ args, code: 1 });
      expect(r.stderr).toContain('usage: kandev');
    }
    expect((await w.api.ok('GET', `/tasks/${root.id}/tree/budget`)).limit_cents).toBe(2500); // nothing half-applied

    expect(JSON.parse((await ok(['tree', 'budget', root.id, '--clear', '--json'])).stdout)).toEqual({ task_id: root.id, cleared: true });
    expect((await w.api.get(`/tasks/${root.id}/tree/budget`)).status).toBe(404);
    const again = await kandev(['tree', 'budget', root.id]);
    expect(again.code).toBe(2);
    expect(again.stderr).toMatch(/refused: NOT_FOUND \(404\)/);
  });

  it('exit 1 for a usage error, 2 for a refused token, and the agent names', async () => {
    for (const args of [
      [],
      ['tasks', 'ls'],
      ['tasks', 'ls', '--workspace'],
      ['tree', 'fold', '00000000-0000-4000-8000-000000000000'],
      ['workspaces', '--bogus'],
    ]) {
      const r = await kandev(args);
      expect({ args, code: r.code }).toEqual({ args, code: 1 });
      expect(r.stderr).toContain('usage: kandev');
    }
    expect((await ok(['--help'])).stdout).toContain('usage: kandev');
    const noToken = await kandev(['workspaces'], { KANDEV_TOKEN: '' });
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toMatch(/refused: UNAUTHORIZED \(401\)/);
    const badId = await kandev(['task', 'show', 'not-a-uuid']);
    expect(badId.code).toBe(2);
    expect(badId.stderr).toMatch(/VALIDATION_ERROR/);
    expect((await ok(['agents'])).stdout.split('\n')).toEqual(expect.arrayContaining(['scripted-acp', 'scripted-codex']));
  });
});
