import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineCron, defineJob, InvalidArgsError } from '../../src/index.js';
import { cronRow, cronUnique, validateCronList } from '../../src/model/cron.js';
import {
  dueFires,
  latestOccurrence,
  MAX_FIRES_PER_EVALUATION,
  nextOccurrence,
  type CronAction,
  type CronSpec,
  type MissedFire,
} from '../../src/model/cron-schedule.js';
import { resolveHostConfig } from '../../src/host/config.js';
import { fieldOf } from '../helpers/option-error.js';

// The cron rule with fixed clocks: occurrences across both of Europe/Berlin's DST transitions of 2025 (spring
// forward on 30 March, 02:00 CET → 03:00 CEST; fall back on 26 October, 03:00 CEST → 02:00 CET), the due-time
// rule under each missedFire policy, and what defineCron refuses. Every expected instant is a literal.

const BERLIN_0230: CronSpec = { cron: '30 2 * * *', timezone: 'Europe/Berlin' };
const at = (iso: string) => new Date(iso);
const iso = (d: Date | null) => d?.toISOString() ?? null;
const fires = (actions: CronAction[]) => actions.map((a) => `${a.action} ${a.fireAt.toISOString()}`);

/** What the leader does over a span of time: evaluates every `stepMs`, and hands back what it handled. */
function simulate(
  spec: CronSpec & { missedFire: MissedFire },
  fromIso: string,
  untilIso: string,
  stepMs: number,
  missedAfterMs = 10_000,
): string[] {
  let handled = at(fromIso);
  const out: string[] = [];
  for (let t = handled.getTime() + stepMs; t <= at(untilIso).getTime(); t += stepMs) {
    for (const a of dueFires(spec, handled, new Date(t), missedAfterMs)) {
      out.push(`${a.action} ${a.fireAt.toISOString()}`);
      handled = a.fireAt;
    }
  }
  return out;
}

describe('occurrences across DST (Europe/Berlin, 2025)', () => {
  it('spring forward: a daily 02:30 fires once on 30 March, at 03:00 CEST (01:00Z), the first valid time after the gap', () => {
    let t = at('2025-03-28T12:00:00Z');
    const seen: (string | null)[] = [];
    for (let i = 0; i < 4; i++) {
      const next = nextOccurrence(BERLIN_0230, t)!;
      seen.push(iso(next));
      t = next;
    }
    expect(seen).toEqual([
      '2025-03-29T01:30:00.000Z', // 02:30 CET (UTC+1)
      '2025-03-30T01:00:00.000Z', // 02:30 does not exist: 03:00 CEST
      '2025-03-31T00:30:00.000Z', // 02:30 CEST (UTC+2)
      '2025-04-01T00:30:00.000Z',
    ]);
  });

  it('fall back: a daily 02:30 fires once on 26 October, at the first of the two 02:30s (00:30Z, CEST)', () => {
    let t = at('2025-10-24T12:00:00Z');
    const seen: (string | null)[] = [];
    for (let i = 0; i < 4; i++) {
      const next = nextOccurrence(BERLIN_0230, t)!;
      seen.push(iso(next));
      t = next;
    }
    expect(seen).toEqual([
      '2025-10-25T00:30:00.000Z', // 02:30 CEST
      '2025-10-26T00:30:00.000Z', // first 02:30 (CEST); the second (01:30Z, CET) does not fire
      '2025-10-27T01:30:00.000Z', // 02:30 CET (UTC+1)
      '2025-10-28T01:30:00.000Z',
    ]);
  });

  it('the leader, evaluating every 5 minutes through each transition day, fires the 02:30 schedule exactly once', () => {
    const spec = { ...BERLIN_0230, missedFire: 'latest' as const };
    expect(simulate(spec, '2025-03-29T23:00:00Z', '2025-03-30T23:00:00Z', 300_000)).toEqual([
      'fire 2025-03-30T01:00:00.000Z',
    ]);
    expect(simulate(spec, '2025-10-25T22:00:00Z', '2025-10-26T23:00:00Z', 300_000)).toEqual([
      'fire 2025-10-26T00:30:00.000Z',
    ]);
    // Evaluating every second around both 02:30s of the repeated hour changes nothing: the second one
    // (01:30Z, CET) does not fire.
    expect(simulate(spec, '2025-10-26T00:29:00Z', '2025-10-26T00:31:00Z', 1_000)).toEqual([
      'fire 2025-10-26T00:30:00.000Z',
    ]);
    expect(simulate(spec, '2025-10-26T01:29:00Z', '2025-10-26T01:31:00Z', 1_000)).toEqual([]);
  });

  it('an interval schedule (every 30 minutes) skips the local times that do not exist and fires on both of a repeated time', () => {
    const spec = { cron: '*/30 * * * *', timezone: 'Europe/Berlin', missedFire: 'latest' as const };
    // 01:30 CET, then 03:00 CEST: 02:00 and 02:30 do not exist.
    expect(simulate(spec, '2025-03-30T00:15:00Z', '2025-03-30T01:45:00Z', 60_000)).toEqual([
      'fire 2025-03-30T00:30:00.000Z',
      'fire 2025-03-30T01:00:00.000Z',
      'fire 2025-03-30T01:30:00.000Z',
    ]);
    // 02:00 CEST, 02:30 CEST, 02:00 CET, 02:30 CET, 03:00 CET.
    expect(simulate(spec, '2025-10-25T23:45:00Z', '2025-10-26T02:00:00Z', 60_000)).toEqual([
      'fire 2025-10-26T00:00:00.000Z',
      'fire 2025-10-26T00:30:00.000Z',
      'fire 2025-10-26T01:00:00.000Z',
      'fire 2025-10-26T01:30:00.000Z',
      'fire 2025-10-26T02:00:00.000Z',
    ]);
  });

  it('latestOccurrence includes an occurrence exactly at the reference, nextOccurrence excludes it', () => {
    expect(iso(latestOccurrence(BERLIN_0230, at('2025-03-30T01:00:00Z')))).toBe('2025-03-30T01:00:00.000Z');
    expect(iso(latestOccurrence(BERLIN_0230, at('2025-03-30T00:59:59.999Z')))).toBe(
      '2025-03-29T01:30:00.000Z',
    );
    expect(iso(nextOccurrence(BERLIN_0230, at('2025-03-30T01:00:00Z')))).toBe('2025-03-31T00:30:00.000Z');
    expect(iso(nextOccurrence(BERLIN_0230, at('2025-03-30T00:59:59.999Z')))).toBe('2025-03-30T01:00:00.000Z');
  });

  it('reads UTC and other zones, and seconds when the expression has six fields', () => {
    const ny = { cron: '0 9 * * 1', timezone: 'America/New_York' };
    // Monday 9:00 EST (UTC-5), and after the US spring forward (9 March 2025) 9:00 EDT (UTC-4).
    expect(iso(nextOccurrence(ny, at('2025-03-01T00:00:00Z')))).toBe('2025-03-03T14:00:00.000Z');
    expect(iso(nextOccurrence(ny, at('2025-03-04T00:00:00Z')))).toBe('2025-03-10T13:00:00.000Z');
    const everySecond = { cron: '* * * * * *', timezone: 'UTC' };
    expect(iso(nextOccurrence(everySecond, at('2025-01-01T00:00:04.999Z')))).toBe('2025-01-01T00:00:05.000Z');
    expect(iso(nextOccurrence(everySecond, at('2025-01-01T00:00:05.000Z')))).toBe('2025-01-01T00:00:06.000Z');
  });
});

describe('dueFires: what the leader acts on', () => {
  const daily = (missedFire: MissedFire) => ({ cron: '0 3 * * *', timezone: 'UTC', missedFire });
  const perSecond = (missedFire: MissedFire) => ({ cron: '* * * * * *', timezone: 'UTC', missedFire });

  it('nothing is due before the next occurrence, nor again once an occurrence was handled', () => {
    expect(dueFires(daily('latest'), at('2025-01-05T03:00:00Z'), at('2025-01-06T02:59:59Z'), 10_000)).toEqual(
      [],
    );
    expect(dueFires(daily('latest'), at('2025-01-05T03:00:00Z'), at('2025-01-05T03:00:05Z'), 10_000)).toEqual(
      [],
    );
  });

  it('on time (at most missedAfterMs past its time) fires under both policies', () => {
    for (const p of ['latest', 'skip'] as const) {
      expect(
        fires(dueFires(daily(p), at('2025-01-04T03:00:00Z'), at('2025-01-05T03:00:10Z'), 10_000)),
      ).toEqual(['fire 2025-01-05T03:00:00.000Z']);
    }
  });

  it("after downtime 'latest' fires the latest missed occurrence once; 'skip' records it as skipped", () => {
    // Down from 1 January to 5 January 12:00: four occurrences missed.
    const from = at('2025-01-01T03:00:00Z');
    const now = at('2025-01-05T12:00:00Z');
    expect(fires(dueFires(daily('latest'), from, now, 10_000))).toEqual(['fire 2025-01-05T03:00:00.000Z']);
    expect(fires(dueFires(daily('skip'), from, now, 10_000))).toEqual(['skip 2025-01-05T03:00:00.000Z']);
    // One millisecond past the window is missed; exactly at its edge is on time.
    expect(fires(dueFires(daily('skip'), from, at('2025-01-05T03:00:10.001Z'), 10_000))).toEqual([
      'skip 2025-01-05T03:00:00.000Z',
    ]);
    expect(fires(dueFires(daily('skip'), from, at('2025-01-05T03:00:10.000Z'), 10_000))).toEqual([
      'fire 2025-01-05T03:00:00.000Z',
    ]);
  });

  it('every on-time occurrence fires, oldest first, when a tick comes late (nothing is lost to jitter)', () => {
    expect(
      fires(
        dueFires(perSecond('latest'), at('2025-01-01T12:00:00Z'), at('2025-01-01T12:00:02.500Z'), 10_000),
      ),
    ).toEqual(['fire 2025-01-01T12:00:01.000Z', 'fire 2025-01-01T12:00:02.000Z']);
  });

  it('after a minute of downtime a per-second schedule fires the last 10 s of occurrences (on time) and drops the rest', () => {
    for (const p of ['latest', 'skip'] as const) {
      const out = dueFires(perSecond(p), at('2025-01-01T12:00:00Z'), at('2025-01-01T12:01:00.500Z'), 10_000);
      expect(out.map((a) => a.action)).toEqual(Array(10).fill('fire'));
      expect(iso(out[0]!.fireAt)).toBe('2025-01-01T12:00:51.000Z');
      expect(iso(out.at(-1)!.fireAt)).toBe('2025-01-01T12:01:00.000Z');
    }
  });

  it('hands back at most MAX_FIRES_PER_EVALUATION on-time occurrences per evaluation', () => {
    const out = dueFires(
      perSecond('latest'),
      at('2025-01-01T00:00:00Z'),
      at('2025-01-01T01:00:00Z'),
      3_600_000,
    );
    expect(out).toHaveLength(MAX_FIRES_PER_EVALUATION);
    expect(iso(out[0]!.fireAt)).toBe('2025-01-01T00:00:01.000Z');
  });

  it('the skip policy, after a day of downtime, skips the late 02:30 in Berlin and fires the next one on time', () => {
    // Handled up to 29 March; the leader comes back at 31 March 00:30:30Z, 30 s after that day's 02:30 CEST.
    const spec = { ...BERLIN_0230, missedFire: 'skip' as const };
    let handled = at('2025-03-29T01:30:00Z');
    const out: string[] = [];
    for (const t of [
      '2025-03-31T00:30:30Z',
      '2025-03-31T12:00:00Z',
      '2025-04-01T00:30:05Z',
      '2025-04-01T00:30:06Z',
    ]) {
      for (const a of dueFires(spec, handled, at(t), 10_000)) {
        out.push(`${a.action} ${a.fireAt.toISOString()}`);
        handled = a.fireAt;
      }
    }
    expect(out).toEqual(['skip 2025-03-31T00:30:00.000Z', 'fire 2025-04-01T00:30:00.000Z']);
  });
});

describe('defineCron', () => {
  const report = defineJob({ kind: 'report', schema: z.object({ day: z.string() }), queue: 'reports' });
  const base = {
    name: 'nightly',
    cron: '30 2 * * *',
    timezone: 'Europe/Berlin',
    kind: report,
    args: { day: 'x' },
  };

  it('stores the definition with the kind defaults, and hashes it', async () => {
    const def = defineCron(base);
    expect(def).toEqual({
      name: 'nightly',
      cron: '30 2 * * *',
      timezone: 'Europe/Berlin',
      kind: 'report',
      missedFire: 'latest',
    });
    const row = await cronRow(def);
    expect(row).toMatchObject({
      queue: 'reports',
      priority: 2,
      maxAttempts: 25,
      argsJson: '{"day":"x"}',
      metaJson: null,
      missedFire: 'latest',
    });
    expect(row.hash).toMatch(/^[0-9a-f]{32}$/);
    // Same definition, same hash; any change, another.
    expect((await cronRow(defineCron(base))).hash).toBe(row.hash);
    expect((await cronRow(defineCron({ ...base, args: { day: 'y' } }))).hash).not.toBe(row.hash);
    expect((await cronRow(defineCron({ ...base, missedFire: 'skip' }))).hash).not.toBe(row.hash);
  });

  it('hashes a definition as the release before the `cron` rename did, so the upgrade rewrites no schedule', async () => {
    const def = defineCron({
      name: 'nightly-report',
      cron: '30 2 * * *',
      timezone: 'Europe/Berlin',
      kind: 'report',
      args: { full: true },
      options: { queue: 'reports', priority: 3, tags: ['ops'] },
    });
    // Computed by commit 9eab16d (the field was then stored as `expression`) for this definition.
    expect((await cronRow(def)).hash).toBe('c10f52e0d830ff0c4de8430556717aa4');
  });

  it('takes a kind name, job options and UTC by default', async () => {
    const def = defineCron({
      name: 'ping',
      cron: '*/5 * * * * *',
      kind: 'ping',
      args: {},
      options: { queue: 'q', priority: 1, maxAttempts: 3, metadata: { a: 1 }, tags: ['t'], unique: true },
    });
    expect(def.timezone).toBe('UTC');
    const row = await cronRow(def);
    expect(row).toMatchObject({ kind: 'ping', queue: 'q', priority: 1, maxAttempts: 3 });
    expect(JSON.parse(row.metaJson!)).toEqual({
      metadata: { a: 1 },
      tags: ['t'],
      unique: { states: ['scheduled', 'available', 'running', 'retryable', 'waiting_external'] },
    });
  });

  it('refuses bad input with an error naming the field', () => {
    expect(fieldOf(() => defineCron({ ...base, timezone: 'Mars/Olympus_Mons' }))).toBe('timezone');
    expect(fieldOf(() => defineCron({ ...base, timezone: '' }))).toBe('timezone');
    expect(fieldOf(() => defineCron({ ...base, cron: 'every day' }))).toBe('cron');
    expect(fieldOf(() => defineCron({ ...base, cron: '61 * * * *' }))).toBe('cron');
    expect(fieldOf(() => defineCron({ ...base, cron: '0 0 31 2 *' }))).toBe('cron'); // never fires
    expect(fieldOf(() => defineCron({ ...base, name: '' }))).toBe('name');
    expect(fieldOf(() => defineCron({ ...base, missedFire: 'all' as never }))).toBe('missedFire');
    expect(fieldOf(() => defineCron({ ...base, kind: {} as never }))).toBe('kind');
    expect(fieldOf(() => defineCron({ ...base, options: { runAt: new Date() } as never }))).toBe(
      'options.runAt',
    );
    expect(fieldOf(() => defineCron({ ...base, options: { priority: 9 as never } }))).toBe(
      'options.priority',
    );
    expect(fieldOf(() => defineCron({ ...base, options: { tags: 'x' as never } }))).toBe('options.tags');
    expect(fieldOf(() => defineCron({ ...base, every: 5 } as never))).toBe('cron.every');
  });

  it("checks args against the kind's schema at declaration; an async schema when a host starts", async () => {
    expect(() => defineCron({ ...base, args: { day: 5 } as never })).toThrow(InvalidArgsError);
    const slow = defineJob<{ n: number }>({
      kind: 'slow',
      schema: {
        '~standard': {
          version: 1,
          vendor: 'test',
          validate: async (v: unknown) =>
            typeof (v as { n?: unknown }).n === 'number'
              ? { value: v as { n: number } }
              : { issues: [{ message: 'n must be a number', path: ['n'] }] },
        },
      },
    });
    const bad = defineCron({ name: 'slow', cron: '@daily', kind: slow, args: { n: 'x' } as never });
    await expect(cronRow(bad)).rejects.toBeInstanceOf(InvalidArgsError);
    expect(
      (await cronRow(defineCron({ name: 'slow', cron: '@daily', kind: slow, args: { n: 1 } }))).argsJson,
    ).toBe('{"n":1}');
  });

  it('a host takes definitions from defineCron only, each name once, and a missed-fire window of at least two ticks', () => {
    const url = 'postgres://localhost/x';
    expect(fieldOf(() => validateCronList('cron', [{ name: 'x' }]))).toBe('cron[0]');
    expect(fieldOf(() => validateCronList('cron', [defineCron(base), defineCron(base)]))).toBe('cron[1]');
    expect(resolveHostConfig({ connectionString: url }).cronMissedAfterMs).toBe(10_000);
    expect(resolveHostConfig({ connectionString: url, cronIntervalMs: 30_000 }).cronMissedAfterMs).toBe(
      60_000,
    );
    expect(fieldOf(() => resolveHostConfig({ connectionString: url, cronMissedAfterMs: 1_000 }))).toBe(
      'cronMissedAfterMs',
    );
    expect(fieldOf(() => resolveHostConfig({ connectionString: url, cron: 'x' as never }))).toBe('cron');
  });

  it("a unique schedule's key is derived per fire time (periodMs buckets count from the fire time)", () => {
    const spec = { states: ['available'], periodMs: 3_600_000 };
    const a = cronUnique(spec, 'k', 'q', '{"a":1}', Date.parse('2025-01-01T10:00:00Z'))!;
    const b = cronUnique(spec, 'k', 'q', '{"a":1}', Date.parse('2025-01-01T10:59:59Z'))!;
    const c = cronUnique(spec, 'k', 'q', '{"a":1}', Date.parse('2025-01-01T11:00:00Z'))!;
    expect(a.key).toBe(b.key);
    expect(a.key).not.toBe(c.key);
    expect(a.states).toEqual(['available']);
    expect(cronUnique(null, 'k', 'q', '{}', 0)).toBeNull();
  });
});
