import { spawn } from 'node:child_process';
import { hostname } from 'node:os';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../src/cli/main.js';
import type { QueueLimits } from '../../src/model/limits.js';
import { createTestSchema, type TestSchema } from '../../src/testing/index.js';
import { claimAsHost, declareLimitedHost } from '../helpers/limited-host.js';
import { serverUrl } from '../helpers/database.js';

// `awa queue limits` against a real schema: it prints each limited queue's limits in a line, where each field
// comes from, what runs and waits at the gate, and the busiest keys; --set/--unset/--clear change the operator's
// override field by field (audited as $AWA_ACTOR, applied by the next claim), --reset drops it; a bad flag exits
// 2 naming it and changes nothing; an unknown queue is refused as `queue pause` refuses it. Most runs are
// in-process through runCli (what the binary calls); one runs the binary as its own process.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const HOUR = 3_600_000;
/** As a host declares them; the rate's period is an hour so the recent starts do not age out during the test. */
const DECLARED: QueueLimits = {
  key: { arg: 'tenant' },
  perKey: { concurrency: 2, rate: { limit: 100, periodMs: HOUR, burst: 100 } },
  queue: { concurrency: 50 },
};

let t: TestSchema;
let env: Record<string, string>;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `awa <args> --schema <the test's>` in-process, as $AWA_ACTOR ops-alice. */
async function awa(...args: string[]): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const code = await runCli([...args, '--schema', t.schema], {
    env,
    stdout: { write: (s: string) => (stdout += s) },
    stderr: { write: (s: string) => (stderr += s) },
  });
  return { code, stdout, stderr };
}

const override = async () => (await t.client.queueLimits({ queue: 'api', keys: 0 }))[0]!.override;

beforeAll(async () => {
  t = await createTestSchema({ connectionString: serverUrl() });
  env = { DATABASE_URL: t.connectionString, AWA_ACTOR: 'ops-alice' };
  await declareLimitedHost(t, 'cli-limits-host', DECLARED);
  await t.client.enqueueMany([
    { kind: 'call', args: { tenant: 'a' }, options: { queue: 'api' } },
    { kind: 'call', args: { tenant: 'a' }, options: { queue: 'api' } },
    { kind: 'call', args: { tenant: 'a' }, options: { queue: 'api' } },
    { kind: 'call', args: { tenant: 'b' }, options: { queue: 'api' } },
    { kind: 'call', args: {}, options: { queue: 'api' } },
  ]);
  // Tenant a's third job is over its 2 running and waits at the gate; b and the job with no key start.
  expect(await claimAsHost(t, 'cli-limits-host')).toBe(4);
});
afterAll(async () => {
  await t?.drop();
});

describe('awa queue limits (reading)', () => {
  it('prints each limited queue: its limits in a line, each field and its source, running, waiting, busiest keys', async () => {
    expect(await awa('queue', 'limits')).toEqual({
      code: 0,
      stderr: '',
      stdout: [
        'api: per key (args.tenant): 2 running, 100/1h (burst 100); queue: 50 running',
        'now: 4 running, 1 waiting at the gate',
        'field               effective           source    declared            override',
        'key.arg             tenant              declared  tenant              -',
        'perKey.concurrency  2                   declared  2                   -',
        'perKey.rate         100/1h (burst 100)  declared  100/1h (burst 100)  -',
        'queue.concurrency   50                  declared  50                  -',
        '',
        'key       running  waiting  recent starts',
        'a         2        1        2',
        '(no key)  1        0        1',
        'b         1        0        1',
        '',
      ].join('\n'),
    });
    // --keys bounds the keys listed; --json is what the client reads.
    const top = await awa('queue', 'limits', 'api', '--keys', '1');
    expect(top.stdout.split('\n').slice(-3)).toEqual([
      'key  running  waiting  recent starts',
      'a    2        1        2',
      '',
    ]);
    const json = await awa('queue', 'limits', '--json');
    expect(JSON.parse(json.stdout)).toEqual(await t.client.queueLimits());
    expect(JSON.parse((await awa('queue', 'limits', 'api', '--json')).stdout)).toEqual(
      (await t.client.queueLimits({ queue: 'api' }))[0],
    );
  });

  it('a queue without limits says so; a name nothing uses is not found (exit 1), as queue show says it', async () => {
    expect(await awa('queue', 'limits', 'plain')).toEqual({
      code: 0,
      stdout: 'plain: no limits\n',
      stderr: '',
    });
    expect(JSON.parse((await awa('queue', 'limits', 'plain', '--json')).stdout)).toEqual({
      queue: 'plain',
      declared: null,
      override: null,
      effective: null,
      running: 0,
      waiting: 0,
      keys: [],
    });
    expect(await awa('queue', 'limits', 'nowhere')).toEqual({
      code: 1,
      stdout: '',
      stderr: 'queue nowhere not found\n',
    });
    expect(await awa('queue', 'limits', 'nowhere', '--json')).toEqual({
      code: 1,
      stdout: 'null\n',
      stderr: 'queue nowhere not found\n',
    });
  });
});

describe('awa queue limits QUEUE --set/--unset/--clear/--reset', () => {
  it('overrides fields, audited as $AWA_ACTOR; the next claim applies them; --clear and --reset go back to declared', async () => {
    expect(
      await awa(
        'queue',
        'limits',
        'api',
        '--set',
        'perKey.concurrency=3',
        '--set=perKey.rate=10/1m,burst=5',
        '--unset',
        'queue.concurrency',
      ),
    ).toEqual({
      code: 0,
      stdout: 'api: limits now: per key (args.tenant): 3 running, 10/1m (burst 5)\n',
      stderr: '',
    });
    expect(await override()).toEqual({
      perKey: { concurrency: 3, rate: { limit: 10, periodMs: 60_000, burst: 5 } },
      queue: { concurrency: null },
    });
    expect((await t.client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: 'ops-alice',
      origin: `cli@${hostname()}`,
      action: 'queue.limits',
      target: 'api',
    });
    // Tenant a has room for a third attempt: its job at the gate starts.
    expect(await claimAsHost(t, 'cli-limits-host')).toBe(1);
    const now = await awa('queue', 'limits', 'api', '--keys', '0');
    expect(now.stdout).toBe(
      [
        'api: per key (args.tenant): 3 running, 10/1m (burst 5)',
        'now: 5 running, 0 waiting at the gate',
        'field               effective        source          declared            override',
        'key.arg             tenant           declared        tenant              -',
        'perKey.concurrency  3                override        2                   3',
        'perKey.rate         10/1m (burst 5)  override        100/1h (burst 100)  10/1m (burst 5)',
        'queue.concurrency   -                override: none  50                  none',
        '',
        '(no key running or waiting)',
        '',
      ].join('\n'),
    );

    // A later command changes only the fields it names.
    expect(
      (await awa('queue', 'limits', 'api', '--clear', 'queue.concurrency', '--set', 'key.arg=account.id'))
        .code,
    ).toBe(0);
    expect(await override()).toEqual({
      key: { arg: 'account.id' },
      perKey: { concurrency: 3, rate: { limit: 10, periodMs: 60_000, burst: 5 } },
    });
    expect(
      JSON.parse(
        (await awa('queue', 'limits', 'api', '--clear', 'key.arg', '--clear', 'perKey.rate', '--json'))
          .stdout,
      ),
    ).toEqual({
      queue: 'api',
      override: { perKey: { concurrency: 3 } },
      effective: { ...DECLARED, perKey: { ...DECLARED.perKey, concurrency: 3 } },
    });

    expect(await awa('queue', 'limits', 'api', '--reset')).toEqual({
      code: 0,
      stdout:
        'api: override cleared; limits now: per key (args.tenant): 2 running, 100/1h (burst 100); queue: 50 running\n',
      stderr: '',
    });
    expect(await override()).toBeNull();
    expect((await t.client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: 'ops-alice',
      action: 'queue.limits.reset',
      target: 'api',
    });
  });

  it.each([
    [
      ['--set', 'perKey.concurrency=0'],
      '--set perKey.concurrency: must be an integer from 1 to 1000000, got 0',
    ],
    [
      ['--set', 'perKey.concurrency=three'],
      '--set perKey.concurrency=three: must be a whole number, e.g. --set perKey.concurrency=3',
    ],
    [['--set', 'perKey.rate=0/1s'], '--set perKey.rate: limit must be an integer from 1 to 10000, got 0'],
    [
      ['--set', 'perKey.rate=10/1s,burst=20'],
      '--set perKey.rate: burst must be an integer from 1 to 10, got 20',
    ],
    [
      ['--set', 'queue.rate=10/2d'],
      '--set queue.rate=10/2d: write the rate as LIMIT/PERIOD with a period in ms, s, m or h, and optionally ,burst=N (e.g. --set queue.rate=100/1s or --set queue.rate=1000/1m,burst=50)',
    ],
    [
      ['--set', 'queue.rate=10/25h'],
      '--set queue.rate: periodMs must be an integer from 1 to 86400000, got 90000000',
    ],
    [['--set', 'perKey.fifo=yes'], '--set perKey.fifo=yes: must be true or false'],
    [
      ['--set', 'perKey.concurrency'],
      '--set perKey.concurrency: write FIELD=VALUE, e.g. --set perKey.rate=100/1s',
    ],
    [['--set', 'key.arg=a..b'], '--set key.arg: must be an args field name or dotted path, like "tenant"'],
    [
      ['--unset', 'perKey.speed'],
      '--unset perKey.speed: not a field of the limits (fields: key.arg, perKey.concurrency, perKey.rate, perKey.fifo, queue.concurrency, queue.rate)',
    ],
    [
      ['--unset', 'queue.rate', '--clear', 'queue.rate'],
      '--clear queue.rate: the field is named twice in this command',
    ],
    [
      ['--reset', '--unset', 'queue.rate'],
      '--reset drops the whole override: give it alone, without --set, --unset or --clear',
    ],
    [['--keys', '3', '--set', 'queue.rate=1/1s'], '--keys applies to reading limits, not to changing them'],
    [['--keys', '-1'], '--keys must be a whole number from 0 to 1000, got -1'],
    [
      ['extra'],
      'usage: awa queue limits [QUEUE] [--keys N] | awa queue limits QUEUE (--set FIELD=VALUE | --unset FIELD | --clear FIELD)… | awa queue limits QUEUE --reset',
    ],
  ])('queue limits api %j exits 2 naming what is wrong, changing nothing', async (flags, message) => {
    const before = await override();
    expect(await awa('queue', 'limits', 'api', ...flags)).toEqual({
      code: 2,
      stdout: '',
      stderr: `awa queue: ${message}\n`,
    });
    expect(await override()).toEqual(before);
  });

  it('refuses a change without a queue, limits flags on another verb, a bad value before connecting, and an unknown queue (exit 1)', async () => {
    expect(await awa('queue', 'limits', '--set', 'queue.rate=1/1s')).toEqual({
      code: 2,
      stdout: '',
      stderr: expect.stringMatching(/^awa queue: name the queue to change: usage: awa queue limits/),
    });
    expect(await awa('queue', 'pause', 'api', '--reset')).toEqual({
      code: 2,
      stdout: '',
      stderr: 'awa queue: --reset applies to queue limits\n',
    });
    // Flags and values are checked before anything connects: a database that is not there is not reached.
    let stderr = '';
    const code = await runCli(['queue', 'limits', 'api', '--set', 'perKey.concurrency=0'], {
      env: { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nope' },
      stdout: { write: () => true },
      stderr: { write: (s: string) => (stderr += s) },
    });
    expect({ code, stderr }).toEqual({
      code: 2,
      stderr: 'awa queue: --set perKey.concurrency: must be an integer from 1 to 1000000, got 0\n',
    });
    const unknown = await awa('queue', 'limits', 'nowhere', '--set', 'perKey.concurrency=1');
    expect({ code: unknown.code, stdout: unknown.stdout }).toEqual({ code: 1, stdout: '' });
    expect(unknown.stderr).toMatch(/^awa queue: No queue "nowhere": .*\[AWA_UNKNOWN_QUEUE\]\n$/);
    expect((await t.client.queueLimits()).map((q) => q.queue)).toEqual(['api']);
  });

  it('the awa binary, as its own process: sets a field and prints JSON, exit 0, audited as $AWA_ACTOR', async () => {
    await t.client.setQueueLimits('api', null);
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        MAIN,
        'queue',
        'limits',
        'api',
        '--set',
        'queue.rate=1000/1s',
        '--json',
        '--schema',
        t.schema,
      ],
      {
        cwd: ROOT,
        env: { ...process.env, ...env, AWA_ACTOR: 'deploy-bot' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', resolve);
    });
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const rate = { limit: 1000, periodMs: 1000, burst: 1000 };
    expect(JSON.parse(stdout)).toEqual({
      queue: 'api',
      override: { queue: { rate } },
      effective: { ...DECLARED, queue: { concurrency: 50, rate } },
    });
    expect((await t.client.auditLog({ limit: 1 }))[0]).toMatchObject({
      actor: 'deploy-bot',
      action: 'queue.limits',
    });
  });

  it('awa queue --help lists the limits flags', async () => {
    const help = await awa('queue', '--help');
    expect(help.code).toBe(0);
    for (const flag of ['--keys', '--set', '--unset', '--clear', '--reset'])
      expect(help.stdout).toMatch(new RegExp(`^  ${flag} `, 'm'));
    expect(help.stdout).toMatch(/limits \[NAME\]/);
  });
});
