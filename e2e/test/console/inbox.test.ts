import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { makeTask, sharedWorld, type SharedWorld } from '../support.js';
import { launchBrowser, shot, type Browser } from './browser.js';

/** The page's storage, for `page.evaluate` callbacks that run in the browser (this program has no DOM lib). */
declare const localStorage: { length: number };
declare const sessionStorage: { getItem(key: string): string | null };
declare const document: { cookie: string };

/**
 * What waits on a person (SPEC R-12.2) and how the console signs in (R-12.4, ADR 0058), in real
 * headless Chromium against the shared stack with scripted agents: the Inbox answers in place and the
 * answer reaches the agent, the board badges the root of a child's question, the question's expiry is
 * shown, a second tab is signed in by the first, and no URL the page requests carries the token.
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
const ui = (workspace?: string, rest = '') => `${w.stack.gatewayUrl}/ui/${workspace ? `#/w/${workspace}${rest}` : ''}`;
const script = (steps: unknown[]) => JSON.stringify({ script: steps });
const inboxItems = async (workspace: string) =>
  (await w.api.ok('GET', `/inbox?workspace_id=${workspace}`)).items as { kind: string; id: string; task_id: string; expires_at: string | null }[];
const agentSaid = async (sessionId: string) =>
  ((await w.api.ok('GET', `/sessions/${sessionId}/messages?limit=500`)).items as { role: string; text: string }[])
    .filter((m) => m.role === 'agent')
    .map((m) => m.text);

/** The seconds an expiry shows ("expires in 42 s"), or NaN when it shows something else. */
const seconds = async (page: Page, scope = page.getByTestId('expiry').first()) => Number(/expires in (\d+) s/.exec((await scope.textContent()) ?? '')?.[1]);

async function signInThroughTheForm(page: Page): Promise<void> {
  await page.goto(ui());
  await page.getByLabel('Operator token').fill(w.token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'Sign out' }).waitFor();
}

describe('console: the inbox', () => {
  it('answers a question and allows a permission from the Inbox: each reaches its agent and leaves the inbox; the expiry counts down', async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Inbox root' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'Inbox child asks' });
    const page = await browser.page(w.token);
    await page.goto(ui(workspace_id, '/inbox'));
    await page.getByTestId('inbox-count').filter({ hasText: '0 waiting' }).waitFor();
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();

    // A child's question and the root's permission request arrive while the Inbox is open (inbox.changed).
    const asking = await w.api.startSession(child.id, { agent: 'scripted-acp', prompt: script([{ ask: [{ id: 'db', text: 'Which database?' }] }]) });
    const permitting = await w.api.startSession(root.id, { agent: 'scripted-acp', prompt: script([{ permission: 'Deploy to staging?' }]) });
    await page.getByTestId('inbox-count').filter({ hasText: '2 waiting' }).waitFor();
    await page.getByTestId('inbox-link').filter({ hasText: 'Inbox (2)' }).waitFor();

    // The question's expiry: what the API says, in words, counting down.
    const question = page.locator('[data-testid="inbox-item"][data-kind="clarification"]');
    const [bundle] = (await inboxItems(workspace_id)).filter((i) => i.kind === 'clarification');
    const expiry = question.getByTestId('expiry');
    expect(await expiry.getAttribute('datetime')).toBe(bundle!.expires_at);
    const first = await seconds(page, expiry);
    expect(first).toBeGreaterThan(0);
    expect(first).toBeLessThanOrEqual(50); // CLARIFICATION_TIMEOUT_MS, the stack's default
    await poll(() => seconds(page, expiry)).toBeLessThan(first);
    await question.getByText('Which database?').waitFor();
    await shot(page, 'inbox');

    await question.getByLabel('Answer to: Which database?').fill('postgres 16');
    await question.getByRole('button', { name: 'Send answers' }).click();
    await question.waitFor({ state: 'detached' });
    expect((await w.api.ok('GET', `/clarification/${bundle!.id}`)).status).toBe('answered');
    await poll(async () => (await agentSaid(asking.id)).some((t) => t.includes('postgres 16'))).toBe(true);

    const permission = page.locator('[data-testid="inbox-item"][data-kind="permission"]');
    await permission.getByText('Deploy to staging?').waitFor();
    await permission.getByTestId('permission-option-allow').click();
    await permission.waitFor({ state: 'detached' });
    await page.getByText('Nothing waits on you in this workspace.').waitFor();
    await page
      .getByTestId('inbox-link')
      .filter({ hasText: /^Inbox$/ })
      .waitFor();
    const [perm] = (await w.api.ok('GET', `/tasks/${root.id}/permissions`)) as { status: string; chosen_option_id: string }[];
    expect(perm).toMatchObject({ status: 'answered', chosen_option_id: 'allow' });
    await poll(async () => (await agentSaid(permitting.id)).includes('permission: allow')).toBe(true);
    expect(await inboxItems(workspace_id)).toEqual([]);
    await page.close();
  });

  it("badges the root's board card, live, for a grandchild's pending question, and shows the expiry on the task page", async () => {
    const { workspace_id, task: root } = await makeTask(w.api, { title: 'Release train' });
    const { task: child } = await makeTask(w.api, { workspace_id, parent_id: root.id, title: 'Backend' });
    const { task: grandchild } = await makeTask(w.api, { workspace_id, parent_id: child.id, title: 'Migrations' });
    await makeTask(w.api, { workspace_id, title: 'Nothing to ask' });
    const review = (await makeTask(w.api, { workspace_id, title: 'Review the parser' })).task;
    await w.api.ok('PATCH', `/tasks/${review.id}`, { status: 'REVIEW' });
    const page = await browser.page(w.token);
    await page.goto(ui(workspace_id));
    const card = (title: string) => page.getByTestId('task-card').filter({ hasText: title });
    await card('Release train').waitFor();
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
    expect(await page.getByTestId('inbox-badge').count()).toBe(0);

    const s = await w.api.startSession(grandchild.id, {
      agent: 'scripted-acp',
      prompt: script([{ ask: [{ id: 'order', text: 'Run the migrations first?', options: ['yes', 'no'] }] }]),
    });
    await card('Release train').getByTestId('inbox-badge').filter({ hasText: '1 waiting on you' }).waitFor();
    expect(await card('Nothing to ask').getByTestId('inbox-badge').count()).toBe(0);
    expect(await page.getByTestId('inbox-badge').count()).toBe(1);
    await shot(page, 'board');

    // The grandchild's page: its question card says when it expires.
    await page.goto(ui(workspace_id, `/t/${grandchild.id}`));
    const bundleCard = page.getByTestId('clarification');
    await bundleCard.getByText('Run the migrations first?').waitFor();
    expect(await seconds(page, bundleCard.getByTestId('expiry'))).toBeGreaterThan(0);
    // Its tree badges every row on the way down to it, and nothing beside it.
    for (const id of [root.id, child.id, grandchild.id])
      await page.locator(`[data-testid="tree-row"][data-task-id="${id}"]`).getByTestId('tree-inbox-badge').filter({ hasText: '1 waiting' }).waitFor();
    expect(await page.getByTestId('tree-inbox-badge').count()).toBe(3);

    // Answered elsewhere (the API): the badge leaves the board without a reload.
    await page.goto(ui(workspace_id));
    await card('Release train').getByTestId('inbox-badge').waitFor();
    const [item] = await inboxItems(workspace_id);
    expect(item).toMatchObject({ task_id: grandchild.id });
    await w.api.ok('POST', `/clarification/${item!.id}/respond`, { answers: [{ question_id: 'order', answer: 'yes' }] });
    await card('Release train').getByTestId('inbox-badge').waitFor({ state: 'detached' });
    await poll(async () => (await agentSaid(s.id)).some((t) => t.includes('yes'))).toBe(true);
    await page.close();
  });
});

describe('console: sign-in across tabs, and no token in any URL', () => {
  it('signs a second tab in from the first, keeps nothing in localStorage or cookies, and signs every tab out together', async () => {
    const first = await browser.page();
    await signInThroughTheForm(first);
    const second = await browser.page();
    await second.goto(ui());
    // No form: the first tab handed its token over the BroadcastChannel handshake.
    await second.getByRole('button', { name: 'Sign out' }).waitFor();
    expect(await second.getByLabel('Operator token').count()).toBe(0);
    for (const tab of [first, second]) {
      expect(
        await tab.evaluate(() => ({ local: localStorage.length, cookie: document.cookie, token: sessionStorage.getItem('kandev.operatorToken') })),
      ).toEqual({
        local: 0,
        cookie: '',
        token: w.token,
      });
    }

    await second.getByRole('button', { name: 'Sign out' }).click();
    await first.getByLabel('Operator token').waitFor();
    await second.getByLabel('Operator token').waitFor();
    for (const tab of [first, second]) expect(await tab.evaluate(() => sessionStorage.getItem('kandev.operatorToken'))).toBeNull();
    // Nobody left to offer a token: a new tab asks, hears nothing and shows the form.
    const third = await browser.page();
    await third.goto(ui());
    await third.getByLabel('Operator token').waitFor();
    await Promise.all([first.close(), second.close(), third.close()]);
  });

  it('opens /ws with a single-use ticket, and no URL the pages request (HTTP or WebSocket) carries the token', async () => {
    const { workspace_id, task } = await makeTask(w.api, { title: 'No token in URLs' });
    const urls: string[] = [];
    const sockets: string[] = [];
    const watch = (page: Page) => {
      page.on('request', (r) => urls.push(r.url()));
      page.on('websocket', (ws) => sockets.push(ws.url()));
      return page;
    };
    const first = watch(await browser.page());
    await signInThroughTheForm(first);
    await first.goto(ui(workspace_id));
    await first.getByTestId('task-card').filter({ hasText: 'No token in URLs' }).waitFor();
    await first.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
    await first.goto(ui(workspace_id, `/t/${task.id}`));
    await first.getByTestId('task-title').waitFor();
    await first.goto(ui(workspace_id, '/inbox'));
    await first.getByTestId('inbox-count').waitFor();
    // A tab signed in by the handshake connects with a ticket of its own.
    const second = watch(await browser.page());
    await second.goto(ui(workspace_id));
    await second.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();

    expect(urls.length).toBeGreaterThan(5);
    expect(sockets.length).toBeGreaterThanOrEqual(2);
    for (const u of [...urls, ...sockets]) {
      expect(u).not.toContain(w.token);
      expect(new URL(u).searchParams.has('token')).toBe(false);
    }
    const tickets = sockets.map((u) => new URL(u).searchParams.get('ticket'));
    for (const t of tickets) expect(t).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
    expect(new Set(tickets).size).toBe(tickets.length); // one ticket per connect, never reused
    await first.getByRole('button', { name: 'Sign out' }).click();
    await Promise.all([first.close(), second.close()]);
  });
});
