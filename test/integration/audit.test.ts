import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AwaClient, defineCron, InvalidOptionError, WorkerHost, type AuditRecord } from '../../src/index.js';
import { runCli } from '../../src/cli/main.js';
import { syncCronDefinitions } from '../../src/host/cron-sync.js';
import { claimJobs, settleAttempts, ringStorage } from '../../src/storage/operations.js';
import { settleAll } from '../helpers/claim.js';
import { QUICK_HOST } from '../helpers/host-database.js';
import { until } from '../helpers/wait.js';
import { storageFixture, type StorageFixture } from './storage-fixture.js';

// The audit trail against a real database: every operator action of the client writes exactly one record with
// who, from where, what and on what, in the same statement as the action (an action that fails leaves no record,
// a record that cannot be written undoes its action); reads page newest first; the leader prunes past the
// retention; `awa audit` lists what the CLI did as $AWA_ACTOR.

let f: StorageFixture;
let client: AwaClient;
const logged: AuditRecord[] = [];
const ALICE = { who: 'alice', origin: '10.1.2.3' };

beforeAll(async () => {
  f = await storageFixture('audit');
  client = new AwaClient({ connectionString: f.url, poolSize: 3, onAudit: (r) => logged.push(r) });
});
afterAll(async () => {
  await client?.close();
  await f?.close();
});

async function auditCount(): Promise<number> {
  const { rows } = await f.pool.query<{ n: number }>('select count(*)::int as n from awa.audit');
  return rows[0]!.n;
}

/** A job waiting in `queue` (enqueueing names the queue, so queue actions know it). */
const enqueue = async (queue: string) => (await client.enqueue('audit_kind', { n: 1 }, { queue })).id;

/** `n` jobs dead-lettered in `queue`: claimed and failed for good, as a host would. */
async function deadLetters(queue: string, n: number): Promise<string[]> {
  await f.pool.query('insert into awa.queue_settings (queue, dlq_enabled) values ($1, true)', [queue]);
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    ids.push((await client.enqueue('audit_kind', { i }, { queue, maxAttempts: 1 })).id);
  }
  const { batches } = await claimJobs(f.pool, f.schema, {
    queue,
    max: n,
    instanceId: 'audit-test',
    agingSeconds: 3600,
    deadlineSeconds: 0,
  });
  await settleAttempts(f.pool, f.schema, settleAll(batches, 'failed', { error: { error: 'boom' } }));
  return ids;
}

async function declareCron(name: string): Promise<void> {
  const c = await f.pool.connect();
  try {
    const def = defineCron({
      name,
      cron: '0 3 * * *',
      kind: 'audit_cron',
      args: {},
      options: { queue: 'audit_cron' },
    });
    await syncCronDefinitions(c, ringStorage(f.schema), `audit-${name}`, [def], 30_000);
  } finally {
    c.release();
  }
}

describe('every operator action writes exactly one record', () => {
  it('with who, origin, action, target and outcome, also handed to onAudit', async () => {
    await enqueue('aq');
    const cancelled = await enqueue('aq');
    const [dlqA, dlqB] = await deadLetters('aq_dlq', 2);
    await declareCron('nightly');
    const by = { actor: ALICE };
    // Each action, and the record it must leave (target and detail as the action saw them).
    const cases: [string, () => Promise<unknown>, Partial<AuditRecord>][] = [
      [
        'pauseQueue',
        () => client.pauseQueue('aq', by),
        { action: 'queue.pause', target: 'aq', detail: { changed: true } },
      ],
      [
        'pauseQueue again',
        () => client.pauseQueue('aq', by),
        { action: 'queue.pause', target: 'aq', detail: { changed: false } },
      ],
      [
        'resumeQueue',
        () => client.resumeQueue('aq', by),
        { action: 'queue.resume', target: 'aq', detail: { changed: true } },
      ],
      [
        'setEnqueueShards',
        () => client.setEnqueueShards('aq', 2, by),
        { action: 'queue.shards', target: 'aq', detail: { shards: 2, before: 1 } },
      ],
      [
        'cancel',
        () => client.cancel(cancelled, 'no longer needed', by),
        {
          action: 'job.cancel',
          target: cancelled,
          detail: { reason: 'no longer needed', cancelledFrom: 'available' },
        },
      ],
      [
        'retryJob',
        () => client.retryJob(cancelled, by),
        { action: 'job.retry', target: cancelled, detail: { retriedFrom: 'cancelled', refused: null } },
      ],
      [
        'retryDlq',
        () => client.retryDlq([dlqA!], by),
        { action: 'dlq.retry', target: dlqA, detail: { ids: [dlqA], retried: [dlqA] } },
      ],
      [
        'purgeDlq',
        () => client.purgeDlq({ ids: [dlqB!] }, by),
        { action: 'dlq.purge', target: dlqB, detail: { ids: [dlqB], purged: 1 } },
      ],
      [
        'pauseCron',
        () => client.pauseCron('nightly', by),
        { action: 'cron.pause', target: 'nightly', detail: { changed: true } },
      ],
      [
        'resumeCron',
        () => client.resumeCron('nightly', by),
        { action: 'cron.resume', target: 'nightly', detail: { changed: true } },
      ],
      ['triggerCron', () => client.triggerCron('nightly', by), { action: 'cron.trigger', target: 'nightly' }],
      [
        'removeCron',
        () => client.removeCron('nightly', by),
        { action: 'cron.remove', target: 'nightly', detail: { removed: true } },
      ],
      [
        'recordAudit',
        () => client.recordAudit({ action: 'billing.refund', target: 'order-7', detail: { cents: 500 } }, by),
        { action: 'billing.refund', target: 'order-7', detail: { cents: 500 } },
      ],
    ];
    for (const [name, act, want] of cases) {
      const before = await auditCount();
      const seen = logged.length;
      await act();
      expect(await auditCount(), name).toBe(before + 1);
      const [newest] = await client.auditLog({ limit: 1 });
      expect(newest, name).toMatchObject({ actor: 'alice', origin: '10.1.2.3', ...want });
      expect(logged.slice(seen), name).toEqual([newest]);
    }
    const trigger = (await client.auditLog({ action: 'cron.trigger' }))[0]!;
    expect(trigger.detail).toMatchObject({ outcome: 'triggered', jobId: expect.stringMatching(/^\d+$/) });
  });

  it('a purge by age records its queue and bound; a dry run records nothing', async () => {
    await deadLetters('aq_purge', 2);
    const before = await auditCount();
    expect(
      await client.purgeDlq({ queue: 'aq_purge', before: new Date(Date.now() + 60_000) }, { dryRun: true }),
    ).toBe(2);
    expect(await auditCount()).toBe(before);
    const bound = new Date(Date.now() + 60_000);
    expect(await client.purgeDlq({ queue: 'aq_purge', before: bound }, { actor: ALICE })).toBe(2);
    const [newest] = await client.auditLog({ limit: 1 });
    expect(newest).toMatchObject({
      action: 'dlq.purge',
      target: 'aq_purge',
      detail: { queue: 'aq_purge', before: bound.toISOString(), purged: 2 },
    });
  });

  it('a call without an actor is recorded as `process` from <host>:<pid>; a client may name its own', async () => {
    await enqueue('aq_who');
    await client.pauseQueue('aq_who');
    expect((await client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: 'process',
      origin: `${hostname()}:${process.pid}`,
      action: 'queue.pause',
    });
    const named = new AwaClient({
      connectionString: f.url,
      actor: { who: 'deploy-bot', origin: 'ci' },
      onAudit: () => {},
    });
    try {
      await named.resumeQueue('aq_who');
      expect((await client.auditLog({ limit: 1 }))[0]).toMatchObject({ actor: 'deploy-bot', origin: 'ci' });
      // The call's own actor wins over the client's.
      await named.pauseQueue('aq_who', { actor: ALICE });
      expect((await client.auditLog({ limit: 1 }))[0]).toMatchObject({ actor: 'alice' });
    } finally {
      await named.close();
    }
  });

  it('a callback is an operator action only for a client that names an actor', async () => {
    const before = await auditCount();
    expect((await client.cancelExternal(randomUUID())).outcome).toBe('rejected');
    expect(await auditCount()).toBe(before);
    const operator = new AwaClient({ connectionString: f.url, actor: ALICE, onAudit: () => {} });
    try {
      expect((await operator.cancelExternal(randomUUID(), 'stuck')).outcome).toBe('rejected');
    } finally {
      await operator.close();
    }
    expect(await auditCount()).toBe(before + 1);
    // The token is a credential: the record names the job it reached (none here), never the token.
    expect((await client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: 'alice',
      action: 'callback.cancel',
      target: null,
      detail: { outcome: 'rejected', error: 'stuck' },
    });
  });

  it('refuses a bad actor, naming the field', async () => {
    const bad = (who: unknown) => client.pauseQueue('aq', { actor: { who, origin: 'x' } as never });
    await expect(bad('')).rejects.toMatchObject({ field: 'options.actor.who' });
    await expect(bad('a\u001b[2J')).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(client.pauseQueue('aq', { colour: 'red' } as never)).rejects.toMatchObject({
      field: 'options.colour',
    });
  });
});

describe('the record commits with its action', () => {
  it('an action that fails leaves no record', async () => {
    await enqueue('aq_fail');
    await f.pool.query(`
      create function public.audit_test_refuse() returns trigger language plpgsql
        as $$ begin raise exception 'refused by test trigger'; end $$;
      create trigger audit_test_refuse before insert or update on awa.queue_settings
        for each row when (new.queue = 'aq_fail') execute function public.audit_test_refuse()`);
    try {
      const before = await auditCount();
      await expect(client.pauseQueue('aq_fail', { actor: ALICE })).rejects.toThrow(/refused by test trigger/);
      expect(await auditCount()).toBe(before);
    } finally {
      await f.pool.query(
        'drop trigger audit_test_refuse on awa.queue_settings; drop function public.audit_test_refuse()',
      );
    }
  });

  it('a record that cannot be written undoes its action', async () => {
    await enqueue('aq_undo');
    await client.pauseQueue('aq_undo', { actor: ALICE });
    await f.pool.query(
      `alter table awa.audit add constraint audit_test_no_resume check (action <> 'queue.resume') not valid`,
    );
    try {
      await expect(client.resumeQueue('aq_undo', { actor: ALICE })).rejects.toThrow(/audit_test_no_resume/);
    } finally {
      await f.pool.query('alter table awa.audit drop constraint audit_test_no_resume');
    }
    // Had the record been a second statement after the action, the queue would be running now.
    expect((await client.queueHealth()).find((q) => q.queue === 'aq_undo')?.paused).toBe(true);
  });

  it('a cron action on an unknown schedule fails and records nothing', async () => {
    const before = await auditCount();
    await expect(client.pauseCron('no-such-schedule', { actor: ALICE })).rejects.toThrow(/no cron schedule/);
    await expect(client.triggerCron('no-such-schedule', { actor: ALICE })).rejects.toThrow(
      /no cron schedule/,
    );
    expect(await auditCount()).toBe(before);
  });
});

describe('reading and pruning', () => {
  it('pages newest first and filters by action and actor', async () => {
    for (let i = 0; i < 5; i++) {
      await client.recordAudit(
        { action: 'paging.test', target: String(i) },
        { actor: { who: `p${i % 2}`, origin: 'o' } },
      );
    }
    const first = await client.auditLog({ action: 'paging.test', limit: 2 });
    expect(first.map((r) => r.target)).toEqual(['4', '3']);
    const second = await client.auditLog({ action: 'paging.test', limit: 2, beforeId: first[1]!.id });
    expect(second.map((r) => r.target)).toEqual(['2', '1']);
    const third = await client.auditLog({ action: 'paging.test', limit: 2, beforeId: second[1]!.id });
    expect(third.map((r) => r.target)).toEqual(['0']);
    const p1 = await client.auditLog({ action: 'paging.test', actor: 'p1' });
    expect(p1.map((r) => r.target)).toEqual(['3', '1']);
    await expect(client.auditLog({ action: 'Not An Action' })).rejects.toMatchObject({
      field: 'filter.action',
    });
  });

  it('the leader deletes records older than auditRetentionMs and keeps the rest', async () => {
    const old = await client.recordAudit({ action: 'prune.test', target: 'old' }, { actor: ALICE });
    const kept = await client.recordAudit({ action: 'prune.test', target: 'kept' }, { actor: ALICE });
    await f.pool.query(`update awa.audit set at = now() - interval '2 days' where id = $1`, [old.id]);
    const host = new WorkerHost({
      connectionString: f.url,
      ...QUICK_HOST,
      queues: { audit_prune_unused: 1 },
      auditRetentionMs: 86_400_000,
    });
    host.on('error', () => {});
    await host.start();
    try {
      await until('the old record to be pruned', async () => {
        const ids = (await client.auditLog({ action: 'prune.test' })).map((r) => r.id);
        return !ids.includes(old.id);
      });
    } finally {
      await host.stop();
    }
    expect((await client.auditLog({ action: 'prune.test' })).map((r) => r.id)).toEqual([kept.id]);
  });
});

describe('awa audit', () => {
  /** Runs `awa …` in-process as AWA_ACTOR=carol. */
  async function awa(...argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    let stdout = '';
    let stderr = '';
    const code = await runCli(argv, {
      env: { DATABASE_URL: f.url, AWA_ACTOR: 'carol' },
      stdout: { write: (s: string) => (stdout += s) },
      stderr: { write: (s: string) => (stderr += s) },
    });
    return { code, stdout, stderr };
  }

  it('lists what the CLI did, as $AWA_ACTOR from cli@<host>, newest first', async () => {
    await enqueue('aq_cli');
    expect((await awa('queue', 'pause', 'aq_cli')).code).toBe(0);
    expect((await awa('queue', 'resume', 'aq_cli')).code).toBe(0);
    const json = await awa('audit', '--json', '--limit', '2');
    expect(json.code).toBe(0);
    const records = JSON.parse(json.stdout) as AuditRecord[];
    expect(records.map((r) => [r.actor, r.origin, r.action, r.target])).toEqual([
      ['carol', `cli@${hostname()}`, 'queue.resume', 'aq_cli'],
      ['carol', `cli@${hostname()}`, 'queue.pause', 'aq_cli'],
    ]);
    const table = await awa('audit', '--actor', 'carol');
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^id\s+at\s+actor\s+origin\s+action\s+target\s+detail$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/)[4])).toEqual(['queue.resume', 'queue.pause']);
    expect((await awa('audit', '--limit', '0')).code).toBe(2);
  });
});
