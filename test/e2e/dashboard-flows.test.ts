import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, defineJob, startDashboard, type JobKind, type RunningServer } from '../../src/index.js';
import { CHROMIUM_ARGS, findChromium, logInWithForm, watchedPage } from '../helpers/browser.js';
import { createTestDatabase, type TestDatabase } from '../helpers/database.js';
import { until } from '../helpers/wait.js';

// The dashboard's Flows pages in Chromium: the list links a flow; its page draws the graph (one box per job,
// coloured by state, one line per edge), lists the jobs with what they run after, and cancels the flow from the
// page (checked in the database). A job name made of markup shows as text.

const executablePath = findChromium();
if (!executablePath) {
  console.warn(
    '[awa e2e] dashboard flow test skipped: no Chromium found (install Debian\'s "chromium" package, as .ci/run does, or set AWA_CHROMIUM)',
  );
}

const USER = 'operator';
const PASSWORD = 'e2e-flows-password-0123';
const HOSTILE = '<img src=x onerror=alert(1)>';

describe.skipIf(!executablePath)('the dashboard Flows pages, in Chromium', () => {
  let db: TestDatabase;
  let client: AwaClient;
  let server: RunningServer;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  beforeAll(async () => {
    db = await createTestDatabase('dashboard_flows');
    client = new AwaClient({ connectionString: db.url, poolSize: 2, onAudit: () => {} });
    await client.migrate();
    server = await startDashboard({ client, auth: { username: USER, password: PASSWORD }, port: 0 });
    browser = await chromium.launch({ executablePath: executablePath!, args: CHROMIUM_ARGS });
    page = await watchedPage(browser, server.url, problems);
  }, 120_000);

  afterAll(async () => {
    await browser?.close();
    await server?.close();
    await client?.close();
    await db?.drop();
  });

  it('lists a flow, draws its graph and jobs, and cancels it from the page', async () => {
    const kind = defineJob({ kind: 'flow_page_step', queue: 'flow_page' }) as JobKind<unknown>;
    const { flowId } = await client.enqueueFlow({
      name: 'nightly',
      jobs: [
        { name: 'extract', kind, args: {} },
        { name: 'transform', kind, args: {}, dependsOn: ['extract'] },
        { name: HOSTILE, kind, args: {}, dependsOn: [{ name: 'extract', onFailure: 'skip' }] },
        { name: 'load', kind, args: {}, dependsOn: ['transform', HOSTILE] },
      ],
    });
    await logInWithForm(page, USER, PASSWORD);

    await page.click('#nav a[data-page=flows]');
    const row = page.locator(`#flows tr[data-flow="${flowId}"]`);
    await until('the flow listed', async () => (await row.count()) === 1);
    expect(await row.textContent()).toContain('nightly');
    await row.locator('a').click();

    await until('the graph drawn', async () => (await page.locator('#flow-graph g.node').count()) === 4);
    expect(await page.locator('#flow-graph line.edge').count()).toBe(4);
    expect(await page.locator('#flow-graph line.edge.skip').count()).toBe(1);
    expect(await page.locator('#flow-graph g.node.available').count()).toBe(1);
    expect(await page.locator('#flow-graph g.node.blocked').count()).toBe(3);
    // The hostile name is text in the graph and the table, never markup.
    expect(await page.locator(`#flow-graph g.node[data-node="${HOSTILE}"] text`).first().textContent()).toBe(
      '<img src=x onerror=…',
    );
    expect(await page.locator('img').count()).toBe(0);
    expect(await page.locator('#flow-jobs tr[data-job-name="load"]').textContent()).toMatch(
      /load.*blocked.*transform, <img src=x onerror=alert\(1\)>/,
    );
    expect(await page.locator('#flow-state').textContent()).toMatch(/running.*1 available, 3 blocked/);

    await page.click('button:has-text("Cancel flow")');
    await until('the notice', async () =>
      /Cancelled 4 job\(s\)/.test((await page.locator('#notice').textContent()) ?? ''),
    );
    expect((await client.getFlow(flowId))!.counts).toEqual({ cancelled: 4 });
    await until(
      'the graph redrawn',
      async () => (await page.locator('#flow-graph g.node.cancelled').count()) === 4,
    );
    expect(await page.locator('button:has-text("Cancel flow")').count()).toBe(0);
    expect(problems).toEqual([]);
  });
});
