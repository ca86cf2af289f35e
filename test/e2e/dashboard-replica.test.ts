import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, startDashboard, type RunningServer } from '../../src/index.js';
import { CHROMIUM_ARGS, findChromium, logInWithForm, watchedPage } from '../helpers/browser.js';
import { startReplicaPair, type ReplicaPair } from '../helpers/replica.js';
import { until } from '../helpers/wait.js';

// The dashboard's header in Chromium when its reads go to a streaming replica: it says the pages come from a
// replica and are caught up; with the standby's replay paused it says how far behind they are and, past 5 s,
// highlights it; once replay resumes it is caught up again. The primary and standby are this file's own.

const executablePath = findChromium();
if (!executablePath) {
  console.warn(
    '[awa e2e] dashboard replica test skipped: no Chromium found (install Debian\'s "chromium" package, as .ci/run does, or set AWA_CHROMIUM)',
  );
}

const USER = 'operator';
const PASSWORD = 'e2e-replica-password-0123';

describe.skipIf(!executablePath)('the dashboard on a read replica, in Chromium', () => {
  let pair: ReplicaPair;
  let client: AwaClient;
  let server: RunningServer;
  let browser: Browser;
  let page: Page;
  const problems: string[] = [];

  beforeAll(async () => {
    pair = await startReplicaPair();
    const primary = new AwaClient({ connectionString: pair.primaryUrl, poolSize: 1 });
    await primary.migrate();
    await primary.close();
    client = new AwaClient({
      connectionString: pair.primaryUrl,
      readConnectionString: pair.replicaUrl,
      poolSize: 2,
      onAudit: () => {},
    });
    await pair.caughtUp();
    server = await startDashboard({ client, auth: { username: USER, password: PASSWORD }, port: 0 });
    browser = await chromium.launch({ executablePath: executablePath!, args: CHROMIUM_ARGS });
    page = await watchedPage(browser, server.url, problems);
  }, 120_000);

  afterAll(async () => {
    await pair?.resumeReplay().catch(() => {});
    await browser?.close();
    await server?.close();
    await client?.close();
    await pair?.stop();
  });

  const header = () => page.locator('#reads');
  async function headerSays(want: RegExp, timeoutMs = 20_000): Promise<string> {
    let last = '';
    await until(
      `the header to say ${String(want)} (last: ${JSON.stringify(last)})`,
      async () => {
        last = (await header().textContent()) ?? '';
        return want.test(last) && (await header().isVisible());
      },
      timeoutMs,
      100,
    );
    return last;
  }

  it('says the pages come from a replica, how far behind it falls while replay is paused, and when it caught up', async () => {
    await logInWithForm(page, USER, PASSWORD);
    await headerSays(/^Reads: replica, caught up$/);
    expect(await header().getAttribute('class')).toBe('reads');

    await pair.pauseReplay();
    await client.enqueue('replica.header', {}, { queue: 'replica_header' });
    const behind = await headerSays(/^Reads: replica, \d+\.\d s behind$/);
    expect(Number(/(\d+\.\d) s/.exec(behind)![1])).toBeGreaterThan(0);
    // Past 5 s behind, the note is highlighted.
    await until(
      'the note to be highlighted',
      async () => (await header().getAttribute('class')) === 'reads behind',
      30_000,
      200,
    );
    // The job the primary took is not on the Queues page the replica serves.
    expect(await page.locator('#queues tbody tr[data-queue="replica_header"]').count()).toBe(0);

    await pair.resumeReplay();
    await pair.caughtUp();
    await headerSays(/^Reads: replica, caught up$/);
    expect(await header().getAttribute('class')).toBe('reads');
    await until(
      'the queue to show',
      async () => (await page.locator('#queues tbody tr[data-queue="replica_header"]').count()) === 1,
    );
    expect(problems).toEqual([]);
  });
});
