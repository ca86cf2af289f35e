import { existsSync } from 'node:fs';
import type { Browser, Page } from 'playwright-core';

// Where a Chromium for the end-to-end tests is: $AWA_CHROMIUM, else Debian's package (`apt-get install
// chromium`, which .ci/run does), else the usual other names. Null when none is installed.

const CANDIDATES = [
  '/usr/bin/chromium',
  '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome',
  '/usr/bin/google-chrome-stable',
];

export function findChromium(): string | null {
  const fromEnv = process.env.AWA_CHROMIUM;
  if (fromEnv) return existsSync(fromEnv) ? fromEnv : null;
  return CANDIDATES.find((p) => existsSync(p)) ?? null;
}

/** Flags for a browser in a container: no sandbox (it needs user namespaces), a small /dev/shm is fine. */
export const CHROMIUM_ARGS = ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'];

/** A page of its own on the dashboard at `baseURL`, pushing every script error and console error onto `problems`
 * (a test expects it empty at the end). */
export async function watchedPage(browser: Browser, baseURL: string, problems: string[]): Promise<Page> {
  const page = await (await browser.newContext({ baseURL })).newPage();
  page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
  });
  return page;
}

/** Logs in through the dashboard's form (username and password). */
export async function logInWithForm(page: Page, username: string, password: string): Promise<void> {
  await page.goto('/dashboard/');
  await page.fill('input[name=username]', username);
  await page.fill('input[name=password]', password);
  await Promise.all([page.waitForLoadState('load'), page.click('button[type=submit]')]);
}
