// npm run screenshots: pictures of the dashboard's main pages for docs/, taken in Debian's Chromium against a
// throwaway database seeded the way the tests seed theirs (test/helpers/dashboard-seed.ts), with a worker host
// left running so the runtimes page has a live leader and the job page recorded progress.
//
// PostgreSQL: $DATABASE_URL (a server the user may create databases on), else postgres@127.0.0.1:5432.
// Chromium: $AWA_CHROMIUM, else /usr/bin/chromium. The database is created and dropped here.

import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { chromium, type Page } from 'playwright-core';
import { AwaClient, defineJob, startDashboard } from '../src/index.js';
import { CHROMIUM_ARGS, findChromium } from '../test/helpers/browser.js';
import { seedDashboard } from '../test/helpers/dashboard-seed.js';

const OUT = new URL('../docs/', import.meta.url);
const TOKEN = randomBytes(24).toString('base64url');

async function main(): Promise<void> {
  const executablePath = findChromium();
  if (!executablePath) throw new Error('no Chromium: apt-get install chromium, or set AWA_CHROMIUM');
  const adminUrl = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  const name = `awa_screenshots_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${admin.escapeIdentifier(name)}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const client = new AwaClient({ connectionString: url.toString(), poolSize: 4 });
  try {
    await client.migrate();
    const seed = await seedDashboard(url.toString(), client);
    const server = await startDashboard({ client, auth: { token: TOKEN }, port: 0 });
    const browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 760 } });
      await page.goto(`${server.url}/dashboard/login`);
      await shot(page, 'dashboard-login.png');
      await page.fill('input[name=password]', TOKEN);
      await Promise.all([page.waitForURL('**/dashboard/'), page.click('button[type=submit]')]);

      // Traffic while the queues page polls, so its sparklines have a shape.
      const mail = defineJob<{ n: number }>({ kind: 'send_email', queue: 'mail' });
      const reports = defineJob<{ report: string }>({ kind: 'build_report', queue: 'reports' });
      for (let i = 0; i < 12; i++) {
        await client.enqueueMany(
          Array.from({ length: 10 + ((i * 7) % 25) }, (_, n) => ({ kind: mail, args: { n } })),
        );
        if (i % 3 === 0) await client.enqueue(reports, { report: `adhoc-${i}` });
        await page.waitForTimeout(700);
      }
      await page.waitForTimeout(2500);
      await shot(page, 'dashboard-queues.png');

      await page.goto(`${server.url}/dashboard/#/jobs?state=completed&queue=mail`);
      await page.locator('#jobs tbody tr').first().waitFor();
      await shot(page, 'dashboard-jobs.png');

      await page.goto(`${server.url}/dashboard/#/job/${seed.failed}`);
      await page.locator('#job-errors').waitFor();
      await shot(page, 'dashboard-job.png');

      await page.goto(`${server.url}/dashboard/#/job/${seed.running}`);
      await page.locator('#job-progress').waitFor();
      await shot(page, 'dashboard-job-running.png');

      await page.goto(`${server.url}/dashboard/#/dlq`);
      await page.locator('#dlq tbody tr').first().waitFor();
      await shot(page, 'dashboard-dlq.png');

      await page.goto(`${server.url}/dashboard/#/runtimes`);
      await page.locator('#runtimes tbody tr').first().waitFor();
      await shot(page, 'dashboard-runtimes.png');

      await page.goto(`${server.url}/dashboard/#/storage`);
      await page.locator('#tables').waitFor();
      await shot(page, 'dashboard-storage.png');
    } finally {
      await browser.close();
      await server.close();
      await seed.stop();
    }
  } finally {
    await client.close();
    await admin.query(`drop database if exists ${admin.escapeIdentifier(name)} with (force)`);
    await admin.end();
  }
}

/** The page as far as it goes, up to 1200 px (long job lists are cut, to keep the PNGs small). */
async function shot(page: Page, file: string): Promise<void> {
  const height = await page.evaluate('document.documentElement.scrollHeight');
  const clip = { x: 0, y: 0, width: 1280, height: Math.min(Number(height), 1200) };
  await page.screenshot({ path: new URL(file, OUT).pathname, fullPage: true, clip });
  console.log(`wrote docs/${file}`);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
