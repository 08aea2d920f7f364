import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import type { Page } from 'playwright-core';
import postgres from 'postgres';
import { makeTask, startWorld, type World } from '../support.js';
import { launchBrowser, shot, type Browser } from './browser.js';

/** The page's document, for `page.evaluate` callbacks that run in the browser (this program has no DOM lib). */
declare const document: { body: { scrollWidth: number } };

/**
 * The operator console (SPEC R-8.4) in real headless Chromium against the whole stack with scripted
 * agents: every check clicks what an operator clicks and reads what the page shows, then confirms
 * the effect through the HTTP API.
 */
let w: World;
let browser: Browser;
beforeAll(async () => {
  [w, browser] = await Promise.all([startWorld({ CANCEL_TIMEOUT_MS: '2000' }), launchBrowser()]);
});
afterAll(async () => {
  await browser?.close();
  await w?.stop();
});

/** Wait for what the page shows (a loaded machine may take seconds to settle a control). */
const poll = <T>(fn: () => Promise<T>) => expect.poll(fn, { timeout: 30_000, interval: 100 });

const ui = (workspace?: string, task?: string) => `${w.stack.gatewayUrl}/ui/${workspace ? `#/w/${workspace}${task ? `/t/${task}` : ''}` : ''}`;
const script = (steps: unknown[], extra: Record<string, unknown> = {}) => JSON.stringify({ script: steps, ...extra });
const session = (taskId: string, prompt: string) => w.api.ok('POST', `/tasks/${taskId}/sessions`, { agent: 'scripted-acp', prompt });
const sessionState = async (id: string) => (await w.api.get(`/sessions/${id}`)).body;

async function openTask(workspace: string, taskId: string): Promise<Page> {
  const page = await browser.page(w.token);
  await page.goto(ui(workspace, taskId));
  await page.getByTestId('task-title').waitFor();
  return page;
}

describe('operator console', () => {
  it('signs in with a token, lists workspaces, shows the board by status and searches titles', async () => {
    const ws = await w.api.ok('POST', '/workspaces', { name: 'console board' });
    await w.api.ok('POST', '/tasks', { workspace_id: ws.id, title: 'Write the release notes' });
    const review = await w.api.ok('POST', '/tasks', { workspace_id: ws.id, title: 'Review the parser' });
    await w.api.ok('PATCH', `/tasks/${review.id}`, { status: 'REVIEW' });
    const page = await browser.page();
    await page.goto(`${w.stack.gatewayUrl}/`); // `/` redirects to /ui/
    await page.getByLabel('Operator token').fill('not-a-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: /token/i }).waitFor();
    await page.getByLabel('Operator token').fill(w.token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByTestId('workspace-select').selectOption(ws.id);
    await page.getByTestId('column-todo').getByText('Write the release notes').waitFor();
    await page.getByTestId('column-review').getByText('Review the parser').waitFor();
    await page.getByTestId('board-search').fill('parser');
    await poll(() => page.getByTestId('task-card').count()).toBe(1);
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
    // A status change pushed on /ws moves the card without a reload.
    await page.getByTestId('board-search').fill('');
    await w.api.ok('PATCH', `/tasks/${review.id}`, { status: 'COMPLETED' });
    await page.getByTestId('column-done').getByText('Review the parser').waitFor();
    // A root task created meanwhile shows at once (task.created), before any status change.
    await w.api.ok('POST', '/tasks', { workspace_id: ws.id, title: 'Triage the new bug' });
    await page.getByTestId('column-todo').getByText('Triage the new bug').waitFor();
    await page.close();
  });

  it('streams the transcript while the agent talks', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Chatty agent' });
    const page = await openTask(workspace_id, task.id);
    const s = await session(task.id, script([{ say: 'first words' }, { sleep_ms: 1500 }, { say: 'second words' }, { sleep_ms: 30_000 }]));
    // The agent's lines (the prompt, which names them too, is a line of its own).
    const said = page.getByTestId('transcript').locator('.msg-agent');
    await said.filter({ hasText: 'first words' }).first().waitFor();
    // Still in the turn: the second line arrives on the open page, pushed by session.message.
    await said.filter({ hasText: 'second words' }).first().waitFor();
    expect((await sessionState(s.id)).turns.at(-1).completed_at).toBeNull();
    await shot(page, 'task-transcript');
    await w.api.post(`/tasks/${task.id}/stop`);
    await page.close();
  });

  it('cancels a running turn from the button and shows the session settle', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Long turn' });
    const s = await session(task.id, script([{ say: 'working on it' }, { sleep_ms: 60_000 }]));
    await eventually(async () => (await sessionState(s.id)).execution?.status === 'RUNNING');
    const page = await openTask(workspace_id, task.id);
    const cancel = page.getByTestId('cancel-turn');
    await cancel.click();
    await page.getByTestId('session-state').filter({ hasText: 'WAITING_FOR_INPUT' }).waitFor();
    await cancel.waitFor({ state: 'detached' });
    const after = await sessionState(s.id);
    expect(after.turns.at(-1).stop_reason).toBe('cancelled');
    expect(after.execution.status).toBe('READY');
    await page.close();
  });

  it('answers a permission request', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Needs permission' });
    const page = await openTask(workspace_id, task.id);
    const s = await session(task.id, script([{ permission: 'Delete the build folder?' }, { say: 'permission handled' }]));
    const request = page.getByTestId('permission');
    await request.getByText('Delete the build folder?').waitFor();
    await shot(page, 'task-permission');
    await request.getByRole('button').first().click();
    await request.waitFor({ state: 'detached' });
    const [perm] = (await w.api.get(`/tasks/${task.id}/permissions`)).body;
    expect(perm.status).toBe('answered');
    await page.getByTestId('transcript').locator('.msg-agent').filter({ hasText: 'permission handled' }).first().waitFor();
    await eventually(async () => (await sessionState(s.id)).turns.at(-1).completed_at !== null);
    await page.close();
  });

  it('skips pending questions', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Agent with questions' });
    const page = await openTask(workspace_id, task.id);
    await session(
      task.id,
      script([
        {
          ask: [
            { id: 'db', text: 'Which database?' },
            { id: 'name', text: 'Service name?' },
          ],
        },
        { say: 'went on without answers' },
      ]),
    );
    const bundle = page.getByTestId('clarification');
    await bundle.getByText('Which database?').waitFor();
    await shot(page, 'task-questions');
    await bundle.getByTestId('skip-questions').click();
    await bundle.waitFor({ state: 'detached' });
    const { bundles } = (await w.api.get(`/tasks/${task.id}/clarifications`)).body;
    expect(bundles[0].status).toBe('rejected');
    expect(bundles[0].questions.map((q: { status: string }) => q.status)).toEqual(['rejected', 'rejected']);
    await page.getByTestId('transcript').locator('.msg-agent').filter({ hasText: 'went on without answers' }).first().waitFor();
    await page.close();
  });

  it('pauses a tree: badges on every task and the running sessions stopped; then resumes', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Feature root' });
    const kids = [];
    for (const title of ['Architect', 'Backend', 'Frontend']) kids.push(await w.api.ok('POST', '/tasks', { workspace_id, parent_id: root.id, title }));
    const sessions = await Promise.all(kids.slice(0, 2).map((k) => session(k.id, script([{ sleep_ms: 60_000 }]))));
    await eventually(async () => (await Promise.all(sessions.map((s) => sessionState(s.id)))).every((s) => s.execution?.status === 'RUNNING'));
    const page = await openTask(workspace_id, root.id);
    await poll(() => page.getByTestId('tree-row').count()).toBe(4);
    await poll(() => page.getByTestId('running').count()).toBe(2);
    await page.getByTestId('pause-tree').click();
    await poll(() => page.getByTestId('hold-badge').filter({ hasText: 'Paused' }).count()).toBe(4);
    await poll(() => page.getByTestId('running').count()).toBe(0);
    for (const s of sessions) expect((await sessionState(s.id)).state).toBe('CANCELLED');
    await page.getByTestId('resume-tree').waitFor();
    await shot(page, 'tree-paused');
    await page.getByTestId('resume-tree').click();
    await poll(() => page.getByTestId('hold-badge').count()).toBe(0);
    await page.getByTestId('pause-tree').waitFor();
    await page.close();
  });

  it('cancels a tree through the confirmation dialog, then restores it', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Tree to cancel' });
    const child = await w.api.ok('POST', '/tasks', { workspace_id, parent_id: root.id, title: 'Child' });
    await w.api.ok('POST', '/tasks', { workspace_id, parent_id: child.id, title: 'Grandchild' });
    await w.api.ok('PATCH', `/tasks/${child.id}`, { status: 'REVIEW' });
    const page = await openTask(workspace_id, root.id);
    // Open the child's subtree from the keyboard.
    await page.getByRole('button', { name: 'Expand Child' }).focus();
    await page.keyboard.press('Enter');
    await poll(() => page.getByTestId('tree-row').count()).toBe(3);
    await page.getByTestId('cancel-tree').click();
    const dialog = page.getByRole('dialog');
    await dialog
      .getByTestId('cancel-dialog-counts')
      .filter({ hasText: /cancels 3 tasks.*0 active wakeups/ })
      .waitFor();
    await shot(page, 'tree-cancel-dialog');
    // Escape closes it and nothing happens.
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'detached' });
    expect((await w.api.post(`/tasks/${root.id}/tree/preview`)).body.active_hold).toBeNull();
    await page.getByTestId('cancel-tree').click();
    await page.getByTestId('confirm-cancel-tree').click();
    await dialog.waitFor({ state: 'detached' });
    await poll(() => page.getByTestId('hold-badge').filter({ hasText: 'Cancelled (tree)' }).count()).toBe(3);
    expect((await w.api.get(`/tasks/${child.id}`)).body.status).toBe('CANCELLED');
    await page.getByTestId('restore-tree').click();
    await poll(() => page.getByTestId('hold-badge').count()).toBe(0);
    expect((await w.api.get(`/tasks/${child.id}`)).body.status).toBe('REVIEW');
    await page.getByTestId('task-status').filter({ hasText: 'To do' }).waitFor();
    await page.close();
  });

  it('shows the seeded totals on the Tree cost card', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Costly tree' });
    const child = await w.api.ok('POST', '/tasks', { workspace_id, parent_id: root.id, title: 'Spender' });
    const seed = (task_id: string, usage_event_id: string, cost_cents: number, tokens_in: number, tokens_cached_in: number, tokens_out: number) =>
      w.api.ok('POST', '/cost-events', { task_id, usage_event_id, model: 'claude-sonnet-4-5', cost_cents, tokens_in, tokens_cached_in, tokens_out });
    await seed(root.id, `ui-${root.id}-1`, 1250, 100_000, 20_000, 5_000);
    await seed(child.id, `ui-${child.id}-1`, 2950, 80_000, 12_000, 3_500);
    await seed(child.id, `ui-${child.id}-1`, 2950, 80_000, 12_000, 3_500); // the same usage event again counts once
    const page = await openTask(workspace_id, root.id);
    const card = page.getByTestId('cost-card');
    await card.getByTestId('cost-total').filter({ hasText: '$42.00' }).waitFor();
    expect(await card.getByTestId('tokens-in').textContent()).toBe('180,000');
    expect(await card.getByTestId('tokens-cached').textContent()).toBe('32,000');
    expect(await card.getByTestId('tokens-out').textContent()).toBe('8,500');
    await shot(page, 'tree-cost');
    await page.close();
  });

  it('keeps a 2,000-task tree responsive by rendering only the rows in view', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Big tree' });
    // 1,999 children written straight into the orchestrator's schema (2,000 POSTs would only time task creation).
    const sql = postgres(w.stack.db.url, { max: 1, onnotice: () => undefined });
    try {
      await sql`INSERT INTO orchestrator.tasks (id, workspace_id, parent_id, title, status)
        SELECT gen_random_uuid(), ${workspace_id}, ${root.id}, 'leaf ' || lpad(i::text, 4, '0'), 'TODO' FROM generate_series(1, 1999) AS i`;
    } finally {
      await sql.end();
    }
    const page = await openTask(workspace_id, root.id);
    const scroller = page.getByTestId('tree-scroll');
    const count = page.getByTestId('tree-count');
    await count.filter({ hasText: '201 shown' }).waitFor(); // the root and its first page of children
    // Scroll to the end and read the next page until all 2,000 are there.
    for (let shown = 201; shown < 2000;) {
      await scroller.evaluate((el) => (el.scrollTop = el.scrollHeight));
      await page.getByRole('button', { name: 'Load more subtasks' }).click();
      shown = Math.min(2000, shown + 200);
      await count.filter({ hasText: `${shown} shown` }).waitFor();
    }
    // Scrolled to the end, the last leaves are on screen, and only a window of rows is in the DOM.
    expect(await page.getByTestId('tree-row').count()).toBeLessThan(80);
    await page.getByTestId('pause-tree').click();
    await poll(() => page.getByTestId('hold-badge').count()).toBe(await page.getByTestId('tree-row').count());
    await page.getByTestId('resume-tree').click();
    await poll(() => page.getByTestId('hold-badge').count()).toBe(0);
    await page.close();
  });

  it('says in plain words when the API refuses, and stays usable in a narrow window', async () => {
    const { workspace_id } = await makeTask(w.api, { title: 'Narrow' });
    const page = await browser.page(w.token, { width: 420, height: 800 });
    // A task id that does not exist: the page explains instead of going blank.
    await page.goto(ui(workspace_id, '00000000-0000-4000-8000-000000000000'));
    await page
      .getByRole('alert')
      .filter({ hasText: /not found/i })
      .first()
      .waitFor();
    await page.goto(ui(workspace_id));
    await page.getByTestId('column-todo').getByText('Narrow').waitFor();
    const width = await page.evaluate(() => document.body.scrollWidth);
    expect(width).toBeLessThanOrEqual(420);
    await page.close();
  });
});
