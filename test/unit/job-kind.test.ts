import { describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  defineHandler,
  defineJob,
  InvalidArgsError,
  InvalidOptionError,
  type ArgsOf,
  type AwaClient,
  type ResultOf,
} from '../../src/index.js';

const expectOptionError = (fn: () => unknown, field: string) => {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught).toBeInstanceOf(InvalidOptionError);
  expect((caught as InvalidOptionError).code).toBe('AWA_INVALID_OPTION');
  expect((caught as InvalidOptionError).field).toBe(field);
};

const rejection = async (p: Promise<unknown>): Promise<unknown> => {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection');
};

describe('defineJob', () => {
  it('applies the defaults: queue "default", priority 2, 25 attempts, inline, no deadline', async () => {
    const k = defineJob({ kind: 'send_email' });
    expect(k).toMatchObject({
      kind: 'send_email',
      queue: 'default',
      priority: 2,
      maxAttempts: 25,
      execution: 'inline',
      deadlineMs: 0,
    });
    expect(k.schema).toBeUndefined();
    // Without a schema args pass through untouched.
    const args = { anything: [1, 'x'] };
    expect(await k.validate(args)).toBe(args);
  });

  it('keeps the options it is given', () => {
    const k = defineJob({
      kind: 'resize',
      queue: 'images',
      priority: 4,
      maxAttempts: 3,
      execution: 'pool',
      deadlineMs: 5_000,
    });
    expect(k).toMatchObject({
      kind: 'resize',
      queue: 'images',
      priority: 4,
      maxAttempts: 3,
      execution: 'pool',
      deadlineMs: 5_000,
    });
  });

  describe('with a zod 4 schema', () => {
    const schema = z.object({
      to: z.email(),
      count: z.number().int().positive().default(1),
      items: z.array(z.object({ sku: z.string().min(1) })),
    });
    const kind = defineJob({ kind: 'order', schema });

    it('returns the validated (parsed) value, defaults filled in', async () => {
      const value: ArgsOf<typeof kind> = await kind.validate({ to: 'a@example.com', items: [{ sku: 'x' }] });
      expect(value).toEqual({ to: 'a@example.com', count: 1, items: [{ sku: 'x' }] });
    });

    it('rejects bad args with InvalidArgsError naming the path of each bad field', async () => {
      const err = await rejection(
        kind.validate({ to: 'not-an-email', count: -2, items: [{ sku: 'a' }, {}] }),
      );
      expect(err).toBeInstanceOf(InvalidArgsError);
      const e = err as InvalidArgsError;
      expect(e.code).toBe('AWA_INVALID_ARGS');
      expect(e.kind).toBe('order');
      expect(e.issues.map((i) => i.path).sort()).toEqual(['count', 'items.1.sku', 'to']);
      expect(e.message).toContain('Invalid args for job kind "order"');
      expect(e.message).toContain('items.1.sku:');
    });

    it('reports a wrong top-level type without a path', async () => {
      const e = (await rejection(kind.validate('just a string'))) as InvalidArgsError;
      expect(e).toBeInstanceOf(InvalidArgsError);
      expect(e.issues).toHaveLength(1);
      expect(e.issues[0]!.path).toBeUndefined();
    });
  });

  it('rejects a bad priority, naming "priority"', () => {
    for (const priority of [0, 5, 1.5, '1']) {
      expectOptionError(() => defineJob({ kind: 'k', priority: priority as never }), 'priority');
    }
  });

  it('rejects a bad maxAttempts, naming "maxAttempts"', () => {
    for (const maxAttempts of [0, -1, 2.5, 1_001, '3']) {
      expectOptionError(() => defineJob({ kind: 'k', maxAttempts: maxAttempts as never }), 'maxAttempts');
    }
  });

  it('rejects a bad queue name, naming "queue"', () => {
    for (const queue of ['', 'bad\nqueue', 'x'.repeat(201), 7]) {
      expectOptionError(() => defineJob({ kind: 'k', queue: queue as never }), 'queue');
    }
  });

  it('rejects a bad kind name and a bad deadline, naming the field', () => {
    expectOptionError(() => defineJob({ kind: '' }), 'kind');
    expectOptionError(() => defineJob({ kind: 'tab\there' }), 'kind');
    expectOptionError(() => defineJob({ kind: 'k', deadlineMs: 0 }), 'deadlineMs');
  });
});

// A kind's result type (its second type argument): handlers are checked against it, result() returns it, and a
// kind defined without one (every kind before results) compiles as before. Checked by tsc (the @ts-expect-error
// lines fail the type check if they stop being errors) and by expectTypeOf.
describe('the result type of a kind', () => {
  it('types handlers and result(), and defaults to unknown', () => {
    const typed = defineJob<{ n: number }, { doubled: number }>({ kind: 'typed_result' });
    expectTypeOf<ResultOf<typeof typed>>().toEqualTypeOf<{ doubled: number }>();
    expectTypeOf<ArgsOf<typeof typed>>().toEqualTypeOf<{ n: number }>();
    const untyped = defineJob<{ n: number }>({ kind: 'untyped_result' });
    expectTypeOf<ResultOf<typeof untyped>>().toEqualTypeOf<unknown>();

    defineHandler(typed, (job) => ({ doubled: job.args.n * 2 }));
    defineHandler(typed, async (job) => ({ doubled: job.args.n * 2 }));
    // @ts-expect-error: the handler must return the kind's result
    defineHandler(typed, () => ({ tripled: 3 }));
    defineHandler(untyped, () => 'anything goes');
    defineHandler(untyped, () => {});

    const client = null as unknown as AwaClient;
    const check = async () => {
      expectTypeOf(await client.result(typed, '1')).toEqualTypeOf<{ doubled: number }>();
      expectTypeOf(await client.result('1')).toEqualTypeOf<unknown>();
      expectTypeOf(await client.result<{ x: 1 }>('1')).toEqualTypeOf<{ x: 1 }>();
    };
    expect(typeof check).toBe('function');
  });
});
