import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { completeJsonLines } from '../helpers/json-lines.js';

describe('completeJsonLines (the chaos and CLI tests read logs being appended to)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'awa-json-lines-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('leaves out an append caught half-copied, and reads it once it is whole', () => {
    const log = join(dir, 'log.jsonl');
    writeFileSync(log, '{"event":"start","id":"1"}\n{"event":"end","i');
    expect(completeJsonLines(log)).toEqual([{ event: 'start', id: '1' }]);
    writeFileSync(log, '{"event":"start","id":"1"}\n{"event":"end","id":"1"}\n');
    expect(completeJsonLines(log)).toEqual([
      { event: 'start', id: '1' },
      { event: 'end', id: '1' },
    ]);
  });

  it('reads no lines from a log not written yet', () => {
    expect(completeJsonLines(join(dir, 'absent.jsonl'))).toEqual([]);
  });
});
