/**
 * Polls `check` until it returns a value other than undefined/false, or fails after `timeoutMs` with the
 * last value seen. For conditions that depend on other sessions finishing (the oldest running transaction of
 * the whole server moves on), not for measuring time.
 */
export async function until<T>(
  what: string,
  check: () => Promise<T | undefined | false>,
  timeoutMs = 15_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Polls until backend `pid` waits for a lock (a row of pg_locks not granted): the step a race test has to
 * reach before it lets the session holding that lock go on. */
export async function untilWaitingForLock(
  db: { query: (text: string, values: unknown[]) => Promise<{ rows: unknown[] }> },
  pid: number,
  what: string,
): Promise<void> {
  await until(what, async () => {
    const { rows } = await db.query(`select 1 from pg_locks where pid = $1 and not granted`, [pid]);
    return rows.length > 0;
  });
}
