import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, startDashboard, type RunningServer } from '../../src/index.js';
import { CHROMIUM_ARGS, findChromium } from '../helpers/browser.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { HOSTILE_TEXT, seedDashboard, type DashboardSeed } from '../helpers/dashboard-seed.js';
import { until } from '../helpers/wait.js';

// The dashboard in a real Chromium (Debian's package, driven by playwright-core) against a real database:
// a wrong password is refused, the pages load without script errors or CSP violations, a job is found and
// opened (markup in its args shows as text), a DLQ entry is retried and a queue paused from the page, each
// checked in the database afterwards.

const executablePath = findChromium();
if (!executablePath) {
  console.warn(
    '[awa e2e] dashboard browser tests skipped: no Chromium found (install Debian\'s "chromium" package, as .ci/run does, or set AWA_CHROMIUM)',
  );
}

/** Waits until the element's text is `want` (or matches it). */
async function seeText(locator: Locator, want: string | RegExp): Promise<void> {
  let last: string | null = null;
  await until(
    `text ${String(want)} (last seen: ${last})`,
    async () => {
      last = await locator
        .first()
        .textContent({ timeout: 1_000 })
        .catch(() => null);
      if (last === null) return false;
      return typeof want === 'string' ? last.trim() === want : want.test(last);
    },
    10_000,
  );
}

/** Waits until the locator matches exactly `n` elements. */
async function seeCount(locator: Locator, n: number): Promise<void> {
  await until(`${n} elements`, async () => (await locator.count()) === n, 10_000);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

const USER = 'operator';
const PASSWORD = 'e2e-password-0123';

describe.skipIf(!executablePath)('dashboard in Chromium', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let seed: DashboardSeed;
  let server: RunningServer;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  /** Script errors, console errors and CSP violations seen by any page. */
  const problems: string[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('dashboard_e2e');
    client = new AwaClient({ connectionString: db.url, poolSize: 4 });
    await client.migrate();
    seed = await seedDashboard(db.url, client);
    // Stopped, so nothing claims the jobs the tests act on.
    await seed.stop();
    server = await startDashboard({ client, auth: { username: USER, password: PASSWORD }, port: 0 });
    browser = await chromium.launch({ executablePath: executablePath!, args: CHROMIUM_ARGS });
    context = await browser.newContext({ baseURL: server.url });
    page = await context.newPage();
    page.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
    page.on('console', (msg) => {
      if (msg.type() === 'error') problems.push(`console: ${msg.text()}`);
    });
  });
  afterAll(async () => {
    await browser?.close();
    await server?.close();
    await seed?.stop();
    await client?.close();
    await db?.drop();
  });

  async function logIn(password: string): Promise<void> {
    await page.goto('/dashboard/');
    await page.waitForURL('**/dashboard/login');
    await page.fill('input[name=username]', USER);
    await page.fill('input[name=password]', password);
    await Promise.all([page.waitForLoadState('load'), page.click('button[type=submit]')]);
  }

  it('refuses a wrong password: the form says so, and no page or API answers', async () => {
    await logIn('not-the-password');
    await seeText(page.locator('#login-error'), 'Wrong credentials.');
    expect(new URL(page.url()).pathname).toBe('/dashboard/login');
    expect(await context.cookies()).toEqual([]);
    const api = await page.request.get('/dashboard/api/queues');
    expect(api.status()).toBe(401);
    // The refused login answered 401, which Chromium logs as a failed load: expected here, and only here.
    expect(problems.splice(0)).toEqual([
      'console: Failed to load resource: the server responded with a status of 401 (Unauthorized)',
    ]);
  });

  it('logs in and loads the queues page with live rows and sparklines', async () => {
    await logIn(PASSWORD);
    expect(new URL(page.url()).pathname).toBe('/dashboard/');
    const cookie = (await context.cookies()).find((c) => c.name === 'awa_dashboard_session');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
    const rows = page.locator('#queues tbody tr');
    await seeCount(rows, 4);
    await seeText(page.locator('tr[data-queue=reports] td').nth(2), '6');
    // Enqueue shards: the seed left every queue at one; a change shows at the next poll.
    await seeText(page.locator('tr[data-queue=reports] td.shards'), '1');
    await client.setEnqueueShards('reports', 3);
    await seeText(page.locator('tr[data-queue=reports] td.shards'), '3');
    await client.setEnqueueShards('reports', 1);
    await seeCount(page.locator('tr[data-queue=mail] svg.spark'), 2);
    // A poll later, each sparkline has a second point.
    await until('a second sample', async () => {
      const points = await page.locator('tr[data-queue=reports] svg.depth polyline').getAttribute('points');
      return (points ?? '').split(' ').length >= 2;
    });
    for (const [nav, heading] of [
      ['runtimes', 'Runtimes'],
      ['cron', 'Cron schedules'],
      ['storage', 'Storage'],
    ]) {
      await page.click(`#nav a[data-page=${nav}]`);
      await seeText(page.locator('main h2'), heading!);
      if (nav === 'runtimes') await seeText(page.locator('#leader'), 'No live leader.');
    }
    await seeText(page.locator('#ring-held'), /ring|slot/);
    expect(problems).toEqual([]);
  });

  it('searches a job and opens its detail', async () => {
    await page.click('#nav a[data-page=jobs]');
    await page.selectOption('#job-search select[name=state]', 'failed');
    await page.fill('#job-search input[name=queue]', 'mail');
    await page.click('#job-search button[type=submit]');
    const row = page.locator(`#jobs tr[data-job="${seed.failed}"]`);
    await row.waitFor();
    await seeCount(page.locator('#jobs tbody tr'), 1);
    await row.locator('a').click();
    await seeText(page.locator('main h2'), `Job ${seed.failed}`);
    await seeText(page.locator('[data-fact=state]'), 'failed');
    await seeText(
      page.locator('#job-errors'),
      new RegExp(escapeRegExp('contacts API answered 503 three times')),
    );

    // By id, through the same form: markup in the args is shown as text and never runs.
    await page.click('#nav a[data-page=jobs]');
    await page.fill('#job-search input[name=id]', seed.hostile);
    await page.click('#job-search button[type=submit]');
    await seeText(page.locator('main h2'), `Job ${seed.hostile}`);
    await seeText(page.locator('#job-args'), new RegExp(escapeRegExp(HOSTILE_TEXT.replace(/"/g, '\\"'))));
    expect(await page.locator('#job-args img').count()).toBe(0);
    expect(await page.evaluate('window.__awaXss')).toBeUndefined();
    expect(problems).toEqual([]);
  });

  it('retries a DLQ entry from the page', async () => {
    const [target, ...others] = seed.dlq;
    await page.click('#nav a[data-page=dlq]');
    await seeCount(page.locator('#dlq tbody tr'), 3);
    await page.locator(`#dlq tr[data-job="${target}"] button[data-action=retry]`).click();
    await seeText(page.locator('#notice'), 'Retried 1 of 1.');
    await seeCount(page.locator('#dlq tbody tr'), 2);
    expect(await client.getJob(target!)).toMatchObject({ state: 'available', queue: 'billing', attempt: 0 });
    for (const id of others) expect((await client.getJob(id))?.state).toBe('dlq');
  });

  it('pauses a queue from the page', async () => {
    await page.click('#nav a[data-page=queues]');
    const row = page.locator('tr[data-queue=reports]');
    await row.locator('button[data-action=pause]').click();
    await seeText(page.locator('#notice'), 'Queue reports paused.');
    await seeText(row.locator('td.state'), 'paused');
    await row.locator('button[data-action=resume]').waitFor();
    expect((await client.counts()).find((c) => c.queue === 'reports')?.paused).toBe(true);
    expect((await client.counts()).find((c) => c.queue === 'mail')?.paused).toBe(false);
    expect(problems).toEqual([]);
  });
});
