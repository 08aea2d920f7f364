import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '@kandev/testkit';
import type { Page } from 'playwright-core';
import { makeTask, sharedWorld, type SharedWorld } from '../support.js';
import { launchBrowser, shot, type Browser } from './browser.js';

/**
 * The console drives work (SPEC R-12.1) and shows held trees right from any entry point (R-8.4): real
 * headless Chromium against the shared stack with scripted agents. Each check clicks what an operator
 * clicks, reads what the page shows, and confirms the effect through the HTTP API.
 */
let w: SharedWorld;
let browser: Browser;
beforeAll(async () => {
  [w, browser] = await Promise.all([sharedWorld(), launchBrowser()]);
});
afterAll(async () => {
  await browser?.close();
  await w?.stop();
});

const poll = <T>(fn: () => Promise<T>) => expect.poll(fn, { timeout: 30_000, interval: 100 });
const ui = (workspace?: string, task?: string) => `${w.stack.gatewayUrl}/ui/${workspace ? `#/w/${workspace}${task ? `/t/${task}` : ''}` : ''}`;
const script = (steps: unknown[]) => JSON.stringify({ script: steps });
const agentLines = (page: Page) => page.getByTestId('transcript').locator('.msg-agent');

async function openTask(workspace: string, taskId: string): Promise<Page> {
  const page = await browser.page(w.token);
  await page.goto(ui(workspace, taskId));
  await page.getByTestId('task-title').waitFor();
  return page;
}

describe('console: driving work', () => {
  it('creates a workspace and a task, starts a session with a chosen agent and a first prompt, then prompts and sees the reply', async () => {
    const page = await browser.page(w.token);
    await page.goto(ui());
    await page.getByLabel('New workspace name').fill('console driving');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.waitForURL(/#\/w\/[0-9a-f-]{36}$/);
    const workspaceId = /#\/w\/([0-9a-f-]{36})/.exec(page.url())![1]!;

    await page.getByRole('heading', { name: 'New task' }).click();
    const form = page.getByTestId('new-task');
    await form.getByLabel('Task title').fill('Draft the changelog');
    await form.getByLabel('Agent').selectOption('scripted-codex');
    await form.getByRole('button', { name: 'Create task' }).click();
    await page.getByTestId('column-todo').getByText('Draft the changelog').click();
    await page.getByTestId('task-title').filter({ hasText: 'Draft the changelog' }).waitFor();
    const [task] = (await w.api.ok('GET', `/tasks?workspace_id=${workspaceId}&roots=true`)).items;
    expect(task).toMatchObject({ title: 'Draft the changelog', agent: 'scripted-codex', parent_id: null });

    // A subtask from the task page: its parent is this task.
    await page.getByRole('heading', { name: 'Add a subtask' }).click();
    await page.getByLabel('Subtask title').fill('Collect the merged PRs');
    await page.getByRole('button', { name: 'Add subtask' }).click();
    await page.getByTestId('tree-row').filter({ hasText: 'Collect the merged PRs' }).waitFor();
    const children = (await w.api.ok('GET', `/tasks?workspace_id=${workspaceId}&parent_id=${task.id}`)).items;
    expect(children.map((c: { title: string }) => c.title)).toEqual(['Collect the merged PRs']);

    const start = page.getByTestId('start-session');
    await start.getByLabel('Agent').selectOption('scripted-acp');
    await start.getByLabel('First prompt').fill('first words for the agent');
    await start.getByRole('button', { name: 'Start session' }).click();
    await agentLines(page).filter({ hasText: 'first words for the agent' }).first().waitFor();
    const detail = await w.api.ok('GET', `/tasks/${task.id}`);
    expect(detail.sessions).toHaveLength(1);
    expect(detail.sessions[0].agent).toBe('scripted-acp');

    // The turn ended: the prompt box sends the next one at once.
    await page.getByTestId('session-state').filter({ hasText: 'WAITING_FOR_INPUT' }).waitFor();
    await page.getByLabel('Prompt', { exact: true }).fill('second words, from the prompt box');
    await page.getByTestId('prompt-send').filter({ hasText: 'Send' }).click();
    await agentLines(page).filter({ hasText: 'second words, from the prompt box' }).first().waitFor();
    await shot(page, 'task-prompt-box');
    const s = await w.api.ok('GET', `/sessions/${detail.sessions[0].id}`);
    expect(s.turns).toHaveLength(2);
    await w.api.post(`/tasks/${task.id}/stop`);
    await page.close();
  });

  it('queues prompts behind a running turn, deletes one, cancels the turn, sends the replacement and resumes the queue', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Steer the agent' });
    const s = await w.api.startSession(task.id, { agent: 'scripted-acp', prompt: script([{ say: 'long turn under way' }, { sleep_ms: 60_000 }]) });
    const page = await openTask(workspace_id, task.id);
    await page.getByTestId('turn-running').waitFor();
    const prompt = page.getByLabel('Prompt', { exact: true });

    // Queued (the default delivery while a turn runs): both wait in the task's queue.
    for (const text of ['queued follow-up', 'a message to drop']) {
      await prompt.fill(text);
      await page.getByTestId('prompt-send').filter({ hasText: 'Queue' }).click();
      await page.getByTestId('queued-message').filter({ hasText: text }).waitFor();
    }
    await page.getByTestId('queued-message').filter({ hasText: 'a message to drop' }).getByTestId('delete-queued').click();
    await poll(() => page.getByTestId('queued-message').count()).toBe(1);
    expect((await w.api.ok('GET', `/tasks/${task.id}/queue`)).map((m: { prompt: string }) => m.prompt)).toEqual(['queued follow-up']);
    await shot(page, 'task-queue');

    // Cancel turn: the agent stays up, the queue waits for the operator (R-3.5).
    await page.getByTestId('cancel-turn').click();
    await page.getByTestId('session-state').filter({ hasText: 'WAITING_FOR_INPUT' }).waitFor();
    await page.getByTestId('queue-paused').waitFor();
    expect((await w.api.ok('GET', `/tasks/${task.id}/queue`)).length).toBe(1);

    // The replacement prompt, sent to the idle session; its turn runs a few seconds.
    await prompt.fill(script([{ say: 'replacement reply' }, { sleep_ms: 4_000 }]));
    await page.getByTestId('prompt-send').filter({ hasText: 'Send' }).click();
    await agentLines(page).filter({ hasText: 'replacement reply' }).first().waitFor();
    await page.getByTestId('resume-queue').click();
    // The queued message runs after the replacement's turn: its echo arrives and the queue empties.
    await agentLines(page).filter({ hasText: 'queued follow-up' }).first().waitFor();
    await page.getByTestId('queue').waitFor({ state: 'detached' });
    expect(await w.api.ok('GET', `/tasks/${task.id}/queue`)).toEqual([]);
    const turns = (await w.api.ok('GET', `/sessions/${s.id}`)).turns as { stop_reason: string | null }[];
    expect(turns.map((t) => t.stop_reason)).toEqual(['cancelled', 'end_turn', 'end_turn']);
    await w.api.post(`/tasks/${task.id}/stop`);
    await page.close();
  });

  it('interrupts a running turn with a prompt', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Interrupt the agent' });
    const s = await w.api.startSession(task.id, { agent: 'scripted-acp', prompt: script([{ sleep_ms: 60_000 }]) });
    const page = await openTask(workspace_id, task.id);
    await page.getByTestId('turn-running').waitFor();
    await page.getByLabel('Prompt', { exact: true }).fill('do this instead');
    await page.getByLabel('Interrupt').check();
    await page.getByTestId('prompt-send').filter({ hasText: 'Interrupt and send' }).click();
    await agentLines(page).filter({ hasText: 'do this instead' }).first().waitFor();
    const turns = (await w.api.ok('GET', `/sessions/${s.id}`)).turns as { stop_reason: string | null }[];
    expect(turns[0]!.stop_reason).toBe('cancelled');
    await w.api.post(`/tasks/${task.id}/stop`);
    await page.close();
  });

  it('marks a task left IN_PROGRESS without a session as needing attention, and restarts it', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'Orphaned work' });
    await w.api.ok('PATCH', `/tasks/${task.id}`, { status: 'IN_PROGRESS' });
    const board = await browser.page(w.token);
    await board.goto(ui(workspace_id));
    await board.getByTestId('column-progress').getByTestId('task-card').filter({ hasText: 'Needs attention' }).waitFor();
    await board.close();
    const page = await openTask(workspace_id, task.id);
    await page.getByTestId('attention-badge').waitFor();
    const restart = page.getByTestId('start-session');
    await restart.getByLabel('First prompt').fill('picking the work up again');
    await page.getByTestId('restart-task').click();
    await agentLines(page).filter({ hasText: 'picking the work up again' }).first().waitFor();
    await page.getByTestId('attention-badge').waitFor({ state: 'detached' });
    expect((await w.api.ok('GET', `/tasks/${task.id}`)).sessions).toHaveLength(1);
    await w.api.post(`/tasks/${task.id}/stop`);
    await page.close();
  });
});

describe('console: held trees from any entry point', () => {
  it('shows the root Paused after a reload and from a link to a child; tree controls and cost only with subtasks', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Held root' });
    const child = (await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'Held child' })).task;
    const { hold } = await w.api.ok('POST', `/tasks/${root.id}/tree/pause`, { reason: 'console badge check' });
    // GET /tasks/:id carries the hold the page badges from (a member's too).
    for (const id of [root.id, child.id]) expect((await w.api.ok('GET', `/tasks/${id}`)).hold).toEqual({ id: hold.id, mode: 'pause' });

    const page = await openTask(workspace_id, root.id);
    await page.getByTestId('task-hold-badge').filter({ hasText: 'Paused' }).waitFor();
    await page.reload();
    await page.getByTestId('task-hold-badge').filter({ hasText: 'Paused' }).waitFor();
    await page.getByTestId('resume-tree').waitFor();
    await page.getByTestId('cost-card').waitFor();

    // Opened by a link to the child: the root's row in the tree still carries the badge.
    await page.goto(ui(workspace_id, child.id));
    await page.getByTestId('task-title').filter({ hasText: 'Held child' }).waitFor();
    const rootRow = page.locator(`[data-testid="tree-row"][data-task-id="${root.id}"]`);
    await rootRow.getByTestId('hold-badge').filter({ hasText: 'Paused' }).waitFor();
    await page.getByTestId('task-hold-badge').filter({ hasText: 'Paused' }).waitFor();
    // The childless child: no Pause / Cancel tree of its own and no Tree cost card.
    await page.getByText('held by the tree of').waitFor();
    expect(await page.getByTestId('pause-tree').count()).toBe(0);
    expect(await page.getByTestId('cost-card').count()).toBe(0);

    // A childless root nothing holds: no tree controls, no cost card.
    const { task: lone } = await makeTask(w.api, { workspace_id, title: 'Lonely root' });
    await page.goto(ui(workspace_id, lone.id));
    await page.getByTestId('task-title').filter({ hasText: 'Lonely root' }).waitFor();
    await page.getByTestId('start-session').waitFor(); // the page has rendered its cards
    expect(await page.getByTestId('pause-tree').count()).toBe(0);
    expect(await page.getByTestId('cancel-tree').count()).toBe(0);
    expect(await page.getByTestId('cost-card').count()).toBe(0);
    await w.api.ok('POST', `/tasks/${root.id}/tree/resume`);
    await page.close();
  });

  it('shows a pause made through the API in the open tree panel within a second, and the resume too', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Watched tree' });
    await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'Watched leaf' });
    const page = await openTask(workspace_id, root.id);
    await page.getByTestId('pause-tree').filter({ hasText: 'Pause tree (2)' }).waitFor();
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();

    await w.api.ok('POST', `/tasks/${root.id}/tree/pause`, { reason: 'paused elsewhere' });
    await page.getByTestId('resume-tree').waitFor({ timeout: 1_000 });
    await page.getByTestId('pause-tree').waitFor({ state: 'detached', timeout: 1_000 });
    await page.getByTestId('task-hold-badge').filter({ hasText: 'Paused' }).waitFor({ timeout: 1_000 });

    await w.api.ok('POST', `/tasks/${root.id}/tree/resume`);
    await page.getByTestId('pause-tree').waitFor({ timeout: 1_000 });
    await eventually(async () => (await w.api.ok('POST', `/tasks/${root.id}/tree/preview`)).active_hold === null);
    await page.close();
  });
});
