// Retry delay after a failed attempt: 2^attempt seconds plus up to 25 % jitter, capped at 24 h. Jitter
// spreads a burst of failures so the retries do not arrive as a burst again.

const CAP_MS = 24 * 60 * 60 * 1000;

export function retryDelayMs(attempt: number, random: () => number = Math.random): number {
  const base = Math.min(2 ** Math.max(attempt, 0) * 1000, CAP_MS);
  return Math.min(Math.round(base * (1 + 0.25 * random())), CAP_MS);
}
