// What a chaos worker logs of an error (test/fixtures/chaos-jobs.ts, errorLine()): a failed run must say which
// statement the server refused, not only its message. Errors raised by a real server.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorLine } from '../fixtures/chaos-jobs.js';
import { serverUrl } from '../helpers/database.js';

describe('errorLine', () => {
  let db: pg.Client;
  beforeAll(async () => {
    db = new pg.Client({ connectionString: serverUrl(), application_name: 'chaos-error-line-test' });
    await db.connect();
  });
  afterAll(async () => {
    await db?.end();
  });

  const failure = async (sql: string) => {
    try {
      await db.query(sql);
    } catch (err) {
      return err;
    }
    throw new Error(`${sql} did not fail`);
  };

  it('names a cancelled statement by its code and routine, and where a PL/pgSQL function raised an error', async () => {
    expect(errorLine(await failure('select pg_cancel_backend(pg_backend_pid()), pg_sleep(5)'))).toEqual({
      event: 'error',
      message: 'canceling statement due to user request',
      context: 'sqlstate 57014 (ProcessInterrupts)',
    });
    const raised = errorLine(await failure(`do $$ begin perform 1 / (select 0); end $$`));
    expect(raised.message).toBe('division by zero');
    expect(raised.context).toMatch(
      /^sqlstate 22012 \(int4div\); where: SQL statement "SELECT 1 \/ \(select 0\)" PL\/pgSQL function inline_code_block line 1 at PERFORM$/,
    );
  });

  it('follows the causes an error wraps, and logs a plain message alone', () => {
    const wrapped = new Error('claim failed', { cause: new Error('connection lost') });
    expect(errorLine(wrapped)).toEqual({
      event: 'error',
      message: 'claim failed',
      context: 'cause: connection lost',
    });
    expect(errorLine('stopped')).toEqual({ event: 'error', message: 'stopped' });
  });
});
