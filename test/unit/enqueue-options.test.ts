import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AwaClient,
  defineJob,
  InvalidArgsError,
  InvalidOptionError,
  PayloadNotSerialisableError,
  PayloadTooLargeError,
} from '../../src/index.js';
import { buildJobRow, toJobRow, type JobOptions } from '../../src/model/enqueue-options.js';
import { optionError } from '../helpers/option-error.js';

const NOW = Date.parse('2030-06-01T12:00:00.000Z');
const kind = defineJob({ kind: 'mail', queue: 'email', priority: 3, maxAttempts: 7 });
const row = (options: JobOptions | undefined) => buildJobRow(kind, '{"a":1}', options, NOW);

describe('buildJobRow', () => {
  it('takes its defaults from the kind, runnable now, no meta', () => {
    expect(row(undefined)).toEqual({
      kind: 'mail',
      queue: 'email',
      priority: 3,
      argsJson: '{"a":1}',
      maxAttempts: 7,
      runAt: null,
      metaJson: null,
      unique: false,
    });
    expect(row({})).toEqual(row(undefined));
  });

  it('lets options override the kind', () => {
    expect(row({ queue: 'urgent', priority: 1, maxAttempts: 2 })).toMatchObject({
      queue: 'urgent',
      priority: 1,
      maxAttempts: 2,
    });
  });

  it('keeps a future runAt, and treats a runAt in the past (or now) as runnable now', () => {
    const future = new Date(NOW + 60_000);
    expect(row({ runAt: future }).runAt).toEqual(future);
    expect(row({ runAt: new Date(NOW - 60_000) }).runAt).toBeNull();
    expect(row({ runAt: new Date(NOW) }).runAt).toBeNull();
  });

  it('turns delayMs into runAt = now + delayMs (0 = now)', () => {
    expect(row({ delayMs: 5_000 }).runAt).toEqual(new Date(NOW + 5_000));
    expect(row({ delayMs: 0 }).runAt).toBeNull();
  });

  it('rejects runAt and delayMs together, naming delayMs', () => {
    const e = optionError(() => row({ runAt: new Date(NOW + 1_000), delayMs: 1_000 }));
    expect(e.field).toBe('delayMs');
    expect(e.message).toContain('not both');
  });

  it('rejects an unknown option key with its name and the known keys', () => {
    const e = optionError(() => row({ prority: 1 } as JobOptions));
    expect(e.field).toBe('options.prority');
    expect(e.message).toContain('priority');
    expect(e.message).toContain('maxAttempts');
  });

  it('refuses a client per job, saying where a client goes instead', () => {
    const e = optionError(() => row({ client: undefined } as JobOptions));
    expect(e.field).toBe('options.client');
    expect(e.message).toContain('second argument of enqueueMany or copyEnqueue');
  });

  it('rejects out-of-range values, naming the field', () => {
    const cases: [JobOptions, string][] = [
      [{ priority: 0 as never }, 'priority'],
      [{ priority: 5 as never }, 'priority'],
      [{ maxAttempts: 0 }, 'maxAttempts'],
      [{ queue: '' }, 'queue'],
      [{ runAt: new Date(Number.NaN) }, 'runAt'],
      [{ runAt: '2030-01-01' as never }, 'runAt'],
      [{ delayMs: -1 }, 'delayMs'],
      [{ delayMs: 1.5 }, 'delayMs'],
    ];
    for (const [options, field] of cases) expect(optionError(() => row(options)).field).toBe(field);
    expect(optionError(() => buildJobRow(kind, '{}', 'fast' as never, NOW)).field).toBe('options');
  });

  it('encodes metadata and tags into metaJson', () => {
    expect(JSON.parse(row({ metadata: { tenant: 't1' }, tags: ['a', 'b'] }).metaJson!)).toEqual({
      metadata: { tenant: 't1' },
      tags: ['a', 'b'],
    });
    expect(JSON.parse(row({ tags: ['only'] }).metaJson!)).toEqual({ tags: ['only'] });
  });

  it('validates tags and metadata', () => {
    const cases: [JobOptions, string][] = [
      [{ tags: 'a' as never }, 'tags'],
      [{ tags: [''] }, 'tags'],
      [{ tags: [7 as never] }, 'tags'],
      [{ tags: ['x'.repeat(101)] }, 'tags'],
      [{ tags: Array.from({ length: 21 }, (_, i) => `t${i}`) }, 'tags'],
      [{ metadata: [] as never }, 'metadata'],
      [{ metadata: null as never }, 'metadata'],
    ];
    for (const [options, field] of cases) expect(optionError(() => row(options)).field).toBe(field);
    expect(row({ tags: Array.from({ length: 20 }, (_, i) => `t${i}`) }).metaJson).not.toBeNull();
  });

  it('rejects metadata that is not JSON', () => {
    expect(() => row({ metadata: { n: 1n } })).toThrow(/BigInt/);
  });
});

describe('toJobRow', () => {
  // Rejections and throws alike, as the client's callers see them (they await it).
  const rowOf = async (...a: Parameters<typeof toJobRow>) => toJobRow(...a);

  it('validates args through the kind schema before building the row', async () => {
    const typed = defineJob({ kind: 'typed', schema: z.object({ id: z.number() }) });
    await expect(rowOf(typed, { id: 'x' }, undefined, 1024, NOW)).rejects.toBeInstanceOf(InvalidArgsError);
    expect(await rowOf(typed, { id: 1 }, { priority: 1 }, 1024, NOW)).toMatchObject({
      kind: 'typed',
      argsJson: '{"id":1}',
      priority: 1,
    });
  });

  it('answers at once unless the schema is asynchronous', async () => {
    const typed = defineJob({ kind: 'typed', schema: z.object({ id: z.number() }) });
    const slow = defineJob({
      kind: 'slow',
      schema: z.object({ id: z.number() }).refine(async (v) => v.id > 0, 'id must be positive'),
    });
    expect(toJobRow(kind, { id: 1 }, undefined, 1024, NOW)).toMatchObject({ argsJson: '{"id":1}' });
    expect(toJobRow(typed, { id: 1 }, undefined, 1024, NOW)).toMatchObject({ argsJson: '{"id":1}' });
    expect(() => toJobRow(typed, { id: 'x' }, undefined, 1024, NOW)).toThrow(InvalidArgsError);
    const pending = toJobRow(slow, { id: 1 }, undefined, 1024, NOW);
    expect(pending).toBeInstanceOf(Promise);
    expect(await pending).toMatchObject({ kind: 'slow', argsJson: '{"id":1}' });
    const refused = await rowOf(slow, { id: -1 }, undefined, 1024, NOW).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(InvalidArgsError);
    expect((refused as Error).message).toContain('id must be positive');
  });

  it('enforces the payload limit', async () => {
    await expect(rowOf(kind, { s: 'x'.repeat(100) }, undefined, 64, NOW)).rejects.toBeInstanceOf(
      PayloadTooLargeError,
    );
  });

  it('a schema whose validator throws is an InvalidArgsError; args that cannot even be read, a PayloadNotSerialisableError', async () => {
    const brittle = defineJob({
      kind: 'brittle',
      schema: z.object({ id: z.number() }).refine(() => {
        throw new Error('refine exploded');
      }),
    });
    const thrown = await rowOf(brittle, { id: 1 }, undefined, 1024, NOW).catch((e: unknown) => e);
    expect(thrown).toBeInstanceOf(InvalidArgsError);
    expect((thrown as Error).message).toContain("the kind's schema threw while validating: refine exploded");
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const unreadable = await rowOf(kind, proxy, undefined, 1024, NOW).catch((e: unknown) => e);
    expect(unreadable).toBeInstanceOf(PayloadNotSerialisableError);
    expect((unreadable as PayloadNotSerialisableError).code).toBe('AWA_PAYLOAD_NOT_SERIALISABLE');
    expect((unreadable as Error).message).toContain('revoked');
  });
});

describe('AwaClient.enqueue options', () => {
  it('refuses options that are not an object before reading them (an array, a number), naming the field', async () => {
    // Never connects: the options are refused first.
    const client = new AwaClient({ connectionString: 'postgres://nobody@127.0.0.1:1/none' });
    try {
      for (const bad of [[], 7, 'queue=q']) {
        const err = await client.enqueue('k', {}, bad as never).then(
          () => null,
          (e: unknown) => e,
        );
        expect(err).toBeInstanceOf(InvalidOptionError);
        expect((err as InvalidOptionError).field).toBe('options');
      }
    } finally {
      await client.close();
    }
  });
});
