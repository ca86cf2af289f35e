// Reading the JSON-lines logs that test fixtures append to while a test polls them.
import { existsSync, readFileSync } from 'node:fs';

/**
 * The complete lines of a JSON-lines log another process is appending to, parsed. A reader can catch an
 * append half-copied (a single write(2) to a regular file is not atomic against a concurrent read), so the
 * text after the last newline is not a line yet and is left for the next read.
 */
export function completeJsonLines<T>(path: string): T[] {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, 'utf8');
  return text
    .slice(0, text.lastIndexOf('\n') + 1)
    .split('\n')
    .filter((l) => l.length > 0)
    .map((l) => JSON.parse(l) as T);
}
