import { hostname } from 'node:os';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AwaClient,
  defineJob,
  startDashboard,
  WorkerHost,
  type JobContext,
  type RunningServer,
} from '../../src/index.js';
import { CHROMIUM_ARGS, findChromium } from '../helpers/browser.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { HOSTILE_TEXT, seedDashboard, WEBHOOK_URL, type DashboardSeed } from '../helpers/dashboard-seed.js';
import { until } from '../helpers/wait.js';

// The dashboard in a real Chromium (Debian's package, driven by playwright-core) against a real database:
// a wrong password is refused, the pages load without script errors or CSP violations, a job is found and
// opened (markup in its args shows as text), a DLQ entry is retried and a queue paused from the page, each
// checked in the database afterwards; the DLQ page filters, counts and selects; a running job names its
// claimer; a hidden tab stops polling; every page fits an 800 px window.

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
    await seeCount(rows, 5);
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

  it('the queues page shows failed and DLQ totals per queue, the DLQ total linking to its entries', async () => {
    await page.click('#nav a[data-page=queues]');
    await seeText(page.locator('tr[data-queue=billing] td.dlq'), '3');
    await seeText(page.locator('tr[data-queue=webhooks] td.dlq'), '1');
    await seeText(page.locator('tr[data-queue=mail] td.dlq'), '0');
    await seeText(page.locator('tr[data-queue=mail] td.failed'), '1');
    await seeText(page.locator('tr[data-queue=billing] td.failed'), '0');
    await page.click('tr[data-queue=billing] td.dlq a');
    await seeText(page.locator('#dlq-totals'), '3 of 4 entries match the filter.');
    await seeCount(page.locator('#dlq tbody tr'), 3);
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
    await seeCount(page.locator('#dlq tbody tr'), 4);
    await page.locator(`#dlq tr[data-job="${target}"] button[data-action=retry]`).click();
    await seeText(page.locator('#notice'), 'Retried 1 of 1.');
    await seeCount(page.locator('#dlq tbody tr'), 3);
    expect(await client.getJob(target!)).toMatchObject({ state: 'available', queue: 'billing', attempt: 0 });
    for (const id of others) expect((await client.getJob(id))?.state).toBe('dlq');
  });

  it('DLQ page: reasons, queue and kind filters with totals, select-all acting on the rows shown', async () => {
    const [, second, third] = seed.dlq;
    const rows = page.locator('#dlq tbody tr');
    await seeCount(rows, 3);
    await seeText(page.locator('#dlq-totals'), '3 entries in the DLQ.');
    await seeText(
      page.locator(`#dlq tr[data-job="${seed.webhook}"] td.reason`),
      `POST ${WEBHOOK_URL} answered 410 Gone`,
    );
    await seeText(
      page.locator(`#dlq tr[data-job="${second}"] td.reason`),
      'card declined for invoice INV-1002',
    );

    const filter = async (queue: string, kind: string) => {
      await page.fill('#dlq-filter input[name=queue]', queue);
      await page.fill('#dlq-filter input[name=kind]', kind);
      await page.click('#dlq-filter button[type=submit]');
    };
    await filter('billing', '');
    await seeText(page.locator('#dlq-totals'), '2 of 3 entries match the filter.');
    await seeCount(rows, 2);
    expect(new URL(page.url()).hash).toBe('#/dlq?queue=billing');
    await filter('', 'deliver_webhook');
    await seeText(page.locator('#dlq-totals'), '1 of 3 entries match the filter.');
    await seeCount(rows, 1);
    await page.locator(`#dlq tr[data-job="${seed.webhook}"]`).waitFor();
    await filter('billing', 'charge_card');
    await seeText(page.locator('#dlq-totals'), '2 of 3 entries match the filter.');
    await seeCount(rows, 2);

    // Select-all checks every row shown; one unchecked leaves it indeterminate; checked again, all are.
    const all = page.locator('#dlq-all');
    const checked = page.locator('#dlq tbody input[type=checkbox]:checked');
    await all.check();
    await seeCount(checked, 2);
    await page.locator(`#dlq tr[data-job="${second}"] input[type=checkbox]`).uncheck();
    expect(
      await page.evaluate("(e => [e.checked, e.indeterminate])(document.getElementById('dlq-all'))"),
    ).toEqual([false, true]);
    await all.check();
    await seeCount(checked, 2);
    await page.click('button:text-is("Retry selected")');
    await seeText(page.locator('#notice'), 'Retried 2 of 2.');
    await seeText(page.locator('#dlq-totals'), '0 of 1 entries match the filter.');
    for (const id of [second, third]) expect((await client.getJob(id!))?.state).toBe('available');
    // The entry the filter hid was not selected.
    expect((await client.getJob(seed.webhook))?.state).toBe('dlq');
    expect(problems).toEqual([]);
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
  it('a running job says when and by which host it was claimed', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const park = defineJob<{ n: number }>({ kind: 'e2e_park', queue: 'e2e_claim' });
    const host = new WorkerHost({ connectionString: db.url, queues: { e2e_claim: 1 }, pollIntervalMs: 20 });
    host.on('error', () => {});
    host.register(park, async (_job, ctx: JobContext) => {
      await Promise.race([gate, new Promise((r) => ctx.signal.addEventListener('abort', r, { once: true }))]);
    });
    const id = (await client.enqueue(park, { n: 1 })).id;
    await host.start();
    try {
      await until('the job to run', async () => (await client.getJob(id))?.state === 'running');
      const instance = (await client.runtimeList()).find((r) => r.live && r.queues.includes('e2e_claim'));
      await page.goto(`/dashboard/#/job/${id}`);
      await seeText(page.locator('[data-fact=state]'), 'running');
      const claimed = page.locator('[data-fact=claimed]');
      await seeText(
        claimed,
        new RegExp(
          ` by ${escapeRegExp(hostname())} pid ${process.pid} \\(${instance!.instanceId.slice(0, 8)}\\)$`,
        ),
      );
      await seeText(page.locator('.timeline'), /claimed by /);
      // A job whose receipt is gone (failed) shows no claim rather than a wrong one.
      await page.goto(`/dashboard/#/job/${seed.failed}`);
      await seeText(page.locator('[data-fact=state]'), 'failed');
      expect(await page.locator('[data-fact=claimed]').count()).toBe(0);
    } finally {
      release();
      await host.stop();
    }
    expect(problems).toEqual([]);
  });

  it('stops polling while the tab is hidden and refreshes at once when it is shown again', async () => {
    // A tab of its own on a fake clock: polls happen only when the test moves time, so "none while hidden" is
    // exact, not a wait that happened to be short. The page's fetch is counted from inside the page.
    const tab = await context.newPage();
    tab.on('pageerror', (err) => problems.push(`pageerror: ${err.message}`));
    const network: string[] = [];
    tab.on('request', (r) => {
      if (r.url().includes('/dashboard/api/')) network.push(r.url());
    });
    await tab.clock.install();
    try {
      await tab.goto('/dashboard/#/queues');
      const points = tab.locator('tr[data-queue=reports] svg.depth polyline');
      const samples = async () => ((await points.getAttribute('points')) ?? '').split(' ').length;
      await until('the first sample', async () => (await samples()) === 1);
      // (Strings: this file is typed without the DOM library.)
      await tab.evaluate(`(() => {
        const real = window.fetch.bind(window);
        window.__apiCalls = 0;
        window.fetch = (...args) => {
          window.__apiCalls++;
          return real(...args);
        };
      })()`);
      const calls = async () => Number(await tab.evaluate('window.__apiCalls'));
      const setVisibility = (state: 'hidden' | 'visible') =>
        tab.evaluate(`(() => {
          Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => '${state}' });
          document.dispatchEvent(new Event('visibilitychange'));
        })()`);

      // Shown: one poll per 2 s of (fake) time.
      await tab.clock.runFor(2_000);
      await until('a poll', async () => (await samples()) === 2);
      expect(await calls()).toBe(1);
      // Hidden: a minute passes and nothing is asked.
      await setVisibility('hidden');
      await tab.clock.runFor(60_000);
      expect(await calls()).toBe(1);
      // Shown again: one request at once, with no time passing, then polling as before.
      await setVisibility('visible');
      await until('the refresh on return', async () => (await samples()) === 3);
      expect(await calls()).toBe(2);
      await tab.clock.runFor(2_000);
      await until('polling again', async () => (await samples()) === 4);
      expect(await calls()).toBe(3);
      // The browser's own record agrees: the first load and those three, nothing else.
      await until('the network log', async () => network.length === 4);
      expect(network.every((u) => new URL(u).pathname === '/dashboard/api/queues')).toBe(true);
    } finally {
      await tab.close();
    }
    expect(problems).toEqual([]);
  });

  it('fits every page in an 800 px window: long cells wrap or clip, wide tables scroll in their own box', async () => {
    // Long unbroken names beside the webhook entry's long URL.
    const longName = `tenant_${'0123456789abcdef'.repeat(6)}`;
    const wide = defineJob<{ note: string }>({ kind: `${longName}_export`, queue: longName });
    const wideId = (await client.enqueue(wide, { note: 'x'.repeat(400) })).id;
    await page.setViewportSize({ width: 800, height: 700 });
    const pages: [string, string][] = [
      ['#/queues', `#queues tr[data-queue="${longName}"]`],
      [`#/jobs?state=available&queue=${longName}`, `#jobs tr[data-job="${wideId}"]`],
      [`#/job/${wideId}`, '#job-args'],
      [`#/job/${seed.webhook}`, '#job-errors'],
      [`#/job/${seed.failed}`, '#job-errors'],
      ['#/dlq', `#dlq tr[data-job="${seed.webhook}"]`],
      ['#/runtimes', '#runtimes tbody tr'],
      ['#/cron', 'main h2'],
      ['#/storage', '#tables tbody tr'],
    ];
    const widths: Record<string, number> = {};
    for (const [hash, ready] of pages) {
      await page.goto(`/dashboard/${hash}`);
      await page.locator(ready).first().waitFor();
      widths[hash] = Number(await page.evaluate('document.documentElement.scrollWidth'));
    }
    expect(Object.entries(widths).filter(([, w]) => w > 800)).toEqual([]);
    expect(problems).toEqual([]);
  });
});
