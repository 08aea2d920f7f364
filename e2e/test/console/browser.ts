import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

/** The page's own sessionStorage, for callbacks that run in the browser (this program has no DOM lib). */
declare const sessionStorage: { setItem(key: string, value: string): void };

/** Debian's chromium (.ci/run installs it); playwright-core downloads no browser of its own. */
export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export interface Browser {
  context: BrowserContext;
  /** A new tab already signed in with `token` (sessionStorage, as the sign-in form leaves it). */
  page(token?: string, viewport?: { width: number; height: number }): Promise<Page>;
  close(): Promise<void>;
}

/** Real headless Chromium on a fresh profile directory. */
export async function launchBrowser(): Promise<Browser> {
  const profile = mkdtempSync(join(tmpdir(), 'kandev-console-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 800 },
  });
  return {
    context,
    async page(token, viewport) {
      const page = await context.newPage();
      if (viewport) await page.setViewportSize(viewport);
      if (token) await page.addInitScript((t) => sessionStorage.setItem('kandev.operatorToken', t), token);
      // A console error is a bug to see in the test output, not to hide.
      page.on('pageerror', (e) => console.error(`[console page] ${e.message}`));
      return page;
    },
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Where screenshots go when CONSOLE_SCREENSHOTS is set (docs/screenshots is refreshed that way). */
export async function shot(page: Page, name: string): Promise<void> {
  const dir = process.env.CONSOLE_SCREENSHOTS;
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  await page.screenshot({ path: join(dir, `${name}.png`) });
}
