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
