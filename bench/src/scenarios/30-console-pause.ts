import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import type { Scenario } from '../scenario.js';
import { e2eIterations, startBenchStack, summarize } from '../e2e.js';
import { seedTree } from '../tree/seed.js';

/**
 * The operator console on a 1,000-task tree in headless Chromium: from the click on
 * "Pause tree" until every tree row on screen shows its "Paused" badge (the hold's `tree_hold.created`
 * push, applied to the console's store and rendered), and the same for "Resume" until the badges
 * are gone. The tree is flat (a root and 999 children, every page of them read first), so the rows
 * in view are the root's children; the floor is the API call alone (`POST /tasks/:id/tree/pause`
 * through the gateway, timed in the same run). Needs Debian's chromium (`/usr/bin/chromium`, or
 * CHROMIUM_PATH); skipped without it.
 */
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SIZE = Number(process.env.BENCH_CONSOLE_TREE ?? 1000);

const scenario: Scenario = {
  name: 'console pause badges',
  async run(ctx) {
    if (ctx.round > 1) return [];
    if (!existsSync(CHROMIUM)) {
      ctx.log(`no chromium at ${CHROMIUM}: console scenario skipped`);
      return [];
    }
    const reps = e2eIterations(9);
    const b = await startBenchStack({});
    ctx.defer(() => b.stop());
    const ws = (await b.api.ok('POST', '/workspaces', { name: 'bench console' })).id as string;
    const { root } = await seedTree(b, ws, SIZE, SIZE);

    const profile = mkdtempSync(join(tmpdir(), 'kandev-bench-chromium-'));
    const browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 1280, height: 800 },
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    ctx.defer(() => browser.close().then(() => rmSync(profile, { recursive: true, force: true })));
    const page = await browser.newPage();
    await page.addInitScript((t) => (globalThis as any).sessionStorage.setItem('kandev.operatorToken', t), b.token);
    await page.goto(`${b.stack.gatewayUrl}/ui/#/w/${ws}/t/${root}`);
    await page.getByTestId('live-state').filter({ hasText: 'Live' }).waitFor();
    // Read every page of children (200 a page) so all rows exist in the tree (only those in view are rendered).
    const count = page.getByTestId('tree-count');
    await count.filter({ hasText: `${Math.min(SIZE, 201)} shown` }).waitFor();
    for (let shown = Math.min(SIZE, 201); shown < SIZE;) {
      await page.getByTestId('tree-scroll').evaluate((el) => (el.scrollTop = el.scrollHeight));
      await page.getByRole('button', { name: 'Load more subtasks' }).click();
      shown = Math.min(SIZE, shown + 200);
      await count.filter({ hasText: `${shown} shown` }).waitFor();
    }
    await page.getByTestId('tree-scroll').evaluate((el) => (el.scrollTop = 0));
    const shown = await page.getByTestId('tree-count').textContent();
    if (!shown?.startsWith(String(SIZE))) throw new Error(`the tree shows ${shown}, not ${SIZE} tasks`);

    /** Every rendered tree row has (or, with none, has no) hold badge. */
    const allRows = (paused: boolean) =>
      page.waitForFunction(
        (want) => {
          const rows: any[] = [...(globalThis as any).document.querySelectorAll('[data-testid="tree-row"]')];
          return rows.length > 0 && rows.every((r: any) => !!r.querySelector('[data-testid="hold-badge"]') === want);
        },
        paused,
        { polling: 'raf', timeout: 30_000 },
      );

    const pause: number[] = [];
    const resume: number[] = [];
    const api: number[] = [];
    for (let i = 0; i < reps; i++) {
      let t = performance.now();
      await page.getByTestId('pause-tree').click();
      await allRows(true);
      pause.push(performance.now() - t);
      await page.getByTestId('resume-tree').waitFor();
      t = performance.now();
      await page.getByTestId('resume-tree').click();
      await allRows(false);
      resume.push(performance.now() - t);
      await page.getByTestId('pause-tree').waitFor();
      // The floor: the same hold through the API alone.
      t = performance.now();
      await b.api.ok('POST', `/tasks/${root}/tree/pause`);
      api.push(performance.now() - t);
      await b.api.ok('POST', `/tasks/${root}/tree/resume`);
      await allRows(false);
      await page.getByTestId('pause-tree').waitFor();
    }
    ctx.log(`console, ${SIZE} tasks: pause click to badges p50 ${summarize(pause).p50.toFixed(0)} ms (API alone ${summarize(api).p50.toFixed(0)} ms)`);
    return [
      {
        id: `console.tree.pause.api.${SIZE}`,
        label: `POST /tasks/:id/tree/pause, ${SIZE} tasks (the API alone, beside the console rows)`,
        stats: summarize(api),
      },
      {
        id: `console.tree.pause.badges.${SIZE}`,
        label: `console: click Pause tree until every tree row in view shows Paused, ${SIZE}-task tree`,
        stats: summarize(pause),
        baseline: `console.tree.pause.api.${SIZE}`,
      },
      {
        id: `console.tree.resume.badges.${SIZE}`,
        label: `console: click Resume until no tree row in view shows a badge, ${SIZE}-task tree`,
        stats: summarize(resume),
        baseline: `console.tree.pause.api.${SIZE}`,
      },
    ];
  },
};
export default scenario;
