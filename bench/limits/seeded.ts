// The limits bench's one source of repeatable randomness: the same jobs in the same order on every run.

/** Numbers in [0, 1) from a linear congruential generator seeded with `seed`: the same sequence every time. */
export function seededRandom(seed = 36): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1_664_525) + 1_013_904_223) >>> 0;
    return s / 4_294_967_296;
  };
}
