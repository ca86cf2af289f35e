import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type RunningServer } from '../../src/index.js';
import type { QueueLimits } from '../../src/model/limits.js';
import { createTestSchema, type TestSchema } from '../../src/testing/index.js';
import { CHROMIUM_ARGS, findChromium, logInWithForm, watchedPage } from '../helpers/browser.js';
import { claimAsHost, declareLimitedHost } from '../helpers/limited-host.js';
import { serverUrl } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// A queue's limits in Chromium: the queues list marks the limited queue and links its page; the page shows the
// limits in effect, where each field comes from, what runs and waits at the gate and the busiest keys (polled);
// the form refuses bad input naming the field (the page's own check and the server's), sets an override that
// the database then holds and the next claim applies, and Reset clears it.

const executablePath = findChromium();
if (!executablePath) {
  console.warn(
    '[awa e2e] dashboard limits test skipped: no Chromium found (install Debian\'s "chromium" package, as .ci/run does, or set AWA_CHROMIUM)',
  );
}

const USER = 'operator';
const PASSWORD = 'e2e-limits-password-0123';
const HOUR = 3_600_000;
/** The rate's period is an hour, so the recent starts the page shows do not age out while the test runs. */
const DECLARED: QueueLimits = {
  key: { arg: 'tenant' },
  perKey: { concurrency: 2, rate: { limit: 100, periodMs: HOUR, burst: 100 } },
  queue: { concurrency: 50 },
};

/** Waits until the element's text is `want`. */
async function seeText(locator: Locator, want: string): Promise<void> {
  let last: string | null = null;
  await until(
    `text ${want}`,
    async () => {
      last = await locator.textContent({ timeout: 1_000 }).catch(() => null);
      return last !== null && last.trim() === want;
    },
    10_000,
  ).catch((err: Error) => {
    throw new Error(`${err.message} (last seen: ${JSON.stringify(last)})`);
  });
}

/** The cells of a table row, as text. */
async function cells(row: Locator): Promise<string[]> {
  return (await row.locator('td').allTextContents()).map((c) => c.trim());
}

describe.skipIf(!executablePath)('a queue’s limits in the dashboard, in Chromium', () => {
  let t: TestSchema;
  let server: RunningServer;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  const override = async () => (await t.client.queueLimits({ queue: 'api', keys: 0 }))[0]!.override;

  beforeAll(async () => {
    t = await createTestSchema({ connectionString: serverUrl() });
    await declareLimitedHost(t, 'e2e-limits-host', DECLARED);
    await t.client.enqueueMany([
      { kind: 'call', args: { tenant: 'a' }, options: { queue: 'api' } },
      { kind: 'call', args: { tenant: 'a' }, options: { queue: 'api' } },
      { kind: 'call', args: { tenant: 'a' }, options: { queue: 'api' } },
      { kind: 'call', args: { tenant: 'b' }, options: { queue: 'api' } },
      { kind: 'call', args: {}, options: { queue: 'plain' } },
    ]);
    // Tenant a's third job is over its 2 running: it waits at the gate.
    expect(await claimAsHost(t, 'e2e-limits-host')).toBe(3);
    server = await startDashboard({
      client: t.client,
      auth: { username: USER, password: PASSWORD },
      port: 0,
    });
    browser = await chromium.launch({ executablePath: executablePath!, args: CHROMIUM_ARGS });
    page = await watchedPage(browser, server.url, problems);
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
    await t?.drop();
  });

  it('shows the limits and keys, refuses bad input naming the field, sets an override, and resets it', async () => {
    await logInWithForm(page, USER, PASSWORD);

    // The list marks the limited queue (its jobs at the gate) and links every queue's page.
    await seeText(page.locator('tr[data-queue=api] td.limits'), 'limited 1 at gate');
    await seeText(page.locator('tr[data-queue=plain] td.limits'), 'none');
    expect(await page.locator('tr[data-queue=api] td.limits a').getAttribute('title')).toBe(
      'per key (args.tenant): 2 running, 100/1h (burst 100); queue: 50 running',
    );
    await page.click('tr[data-queue=api] td.limits a');

    await seeText(
      page.locator('#limits-summary'),
      'per key (args.tenant): 2 running, 100/1h (burst 100); queue: 50 running',
    );
    await seeText(page.locator('#limits-now'), '3 running under the limits, 1 waiting at the gate.');
    expect(await cells(page.locator('#limits-fields tr[data-field="perKey.concurrency"]'))).toEqual([
      'perKey.concurrency',
      '2',
      'declared',
      '2',
      '—',
    ]);
    expect(
      await page.locator('#limits-fields tbody tr').evaluateAll((rows) => rows.map((r) => r.dataset.field)),
    ).toEqual(['key.arg', 'perKey.concurrency', 'perKey.rate', 'queue.concurrency']);
    expect(await cells(page.locator('#limit-keys tr[data-key=a]'))).toEqual(['a', '2', '1', '2']);
    expect(await cells(page.locator('#limit-keys tr[data-key=b]'))).toEqual(['b', '1', '0', '1']);
    expect(await page.inputValue('#limits-form input[name="perKey.concurrency"]')).toBe('');
    expect(await page.getAttribute('#limits-form input[name="perKey.concurrency"]', 'placeholder')).toBe(
      '2 declared',
    );

    expect(await page.getAttribute('#limits-form input[name="perKey.rate"]', 'placeholder')).toBe(
      '100/1h,burst=100 declared',
    );
    expect(await page.getAttribute('#limits-form input[name="queue.rate"]', 'placeholder')).toBe(
      'none declared',
    );

    // A rate the page cannot read is refused before it is sent, naming the field.
    await page.fill('#limits-form input[name="perKey.rate"]', '10 per second');
    await page.click('#limits-form button[type=submit]');
    await seeText(
      page.locator('#limits-error'),
      'perKey.rate: write the rate as LIMIT/PERIOD (100/1s, 20/500ms, 1000/1m), optionally ,burst=N; or none',
    );
    expect(await page.getAttribute('#limits-form input[name="perKey.rate"]', 'aria-invalid')).toBe('true');
    // A count the server refuses: its message names the field, and the input is marked.
    await page.fill('#limits-form input[name="perKey.rate"]', '');
    await page.fill('#limits-form input[name="perKey.concurrency"]', '0');
    await page.click('#limits-form button[type=submit]');
    await seeText(
      page.locator('#limits-error'),
      'Invalid option "limits.perKey.concurrency": must be an integer from 1 to 1000000, got 0',
    );
    expect(await page.getAttribute('#limits-form input[name="perKey.concurrency"]', 'aria-invalid')).toBe(
      'true',
    );
    expect(await page.getAttribute('#limits-form input[name="perKey.rate"]', 'aria-invalid')).toBeNull();
    expect(await override()).toBeNull();

    // An override of three fields.
    await page.fill('#limits-form input[name="perKey.concurrency"]', '3');
    await page.fill('#limits-form input[name="queue.rate"]', '20/1s,burst=5');
    await page.fill('#limits-form input[name="queue.concurrency"]', 'none');
    await page.click('#limits-form button[type=submit]');
    await seeText(
      page.locator('#notice'),
      'Queue api: limits now: per key (args.tenant): 3 running, 100/1h (burst 100); queue: 20/1s (burst 5).',
    );
    expect(await override()).toEqual({
      perKey: { concurrency: 3 },
      queue: { concurrency: null, rate: { limit: 20, periodMs: 1000, burst: 5 } },
    });
    expect((await t.client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: USER,
      action: 'queue.limits',
      target: 'api',
    });
    await seeText(page.locator('#limits-error'), '');
    await seeText(
      page.locator('#limits-summary'),
      'per key (args.tenant): 3 running, 100/1h (burst 100); queue: 20/1s (burst 5)',
    );
    expect(await cells(page.locator('#limits-fields tr[data-field="perKey.concurrency"]'))).toEqual([
      'perKey.concurrency',
      '3',
      'override',
      '2',
      '3',
    ]);
    expect(await cells(page.locator('#limits-fields tr[data-field="queue.concurrency"]'))).toEqual([
      'queue.concurrency',
      '—',
      'override: none',
      '50',
      'none',
    ]);
    expect(await page.inputValue('#limits-form input[name="queue.rate"]')).toBe('20/1s,burst=5');
    expect(await page.inputValue('#limits-form input[name="queue.concurrency"]')).toBe('none');

    // The next claim applies it (tenant a may run 3); the page's poll shows the job that left the gate.
    expect(await claimAsHost(t, 'e2e-limits-host')).toBe(1);
    await seeText(page.locator('#limits-now'), '4 running under the limits, 0 waiting at the gate.');
    expect(await cells(page.locator('#limit-keys tr[data-key=a]'))).toEqual(['a', '3', '0', '3']);

    await page.click('#limits-reset');
    await seeText(
      page.locator('#notice'),
      'Queue api: override cleared; limits now: per key (args.tenant): 2 running, 100/1h (burst 100); queue: 50 running.',
    );
    expect(await override()).toBeNull();
    expect((await t.client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: USER,
      action: 'queue.limits.reset',
    });
    await seeText(page.locator('#limits-fields tr[data-field="perKey.concurrency"] td.source'), 'declared');
    for (const name of ['perKey.concurrency', 'perKey.rate', 'queue.concurrency', 'queue.rate'])
      expect(await page.inputValue(`#limits-form input[name="${name}"]`)).toBe('');

    // The page fits an 800 px window: the form wraps, the tables scroll in their own boxes.
    await page.setViewportSize({ width: 800, height: 700 });
    expect(Number(await page.evaluate('document.documentElement.scrollWidth'))).toBeLessThanOrEqual(800);

    // The one refusal the server answered is the browser's only console error.
    expect(problems).toEqual([
      'console: Failed to load resource: the server responded with a status of 400 (Bad Request)',
    ]);
  });
});
