import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  cpSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  truncateSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { copyBinaries } from '../../src/embedded/binaries.js';
import { BinaryCopyMismatchError } from '../../src/embedded/errors.js';

// The launcher copies the PostgreSQL binaries somewhere the server user can run them when it cannot run
// them in place (npx under root's mode-700 home). Whoever made the copy found at the copy's name (this
// launcher, another one racing it, an earlier run), it is checked against the installed binaries before
// anything runs from it. Real files in a temp dir; a small stand-in for the package's native/ tree.

const isRoot = process.getuid?.() === 0;

describe('copyBinaries', () => {
  let dir: string;
  let native: string;
  let copyRoot: string;
  const lines: string[] = [];
  const log = (line: string) => lines.push(line);

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'awa-bincopy-'));
    native = join(dir, 'pkg', 'native');
    for (const sub of ['bin', 'lib', 'share']) mkdirSync(join(native, sub), { recursive: true });
    writeFileSync(join(native, 'bin', 'postgres'), randomBytes(200_000), { mode: 0o755 });
    writeFileSync(join(native, 'bin', 'initdb'), randomBytes(30_000), { mode: 0o755 });
    writeFileSync(join(native, 'lib', 'libpq.so.5.18'), randomBytes(50_000), { mode: 0o644 });
    writeFileSync(join(native, 'share', 'postgres.bki'), 'create pg_proc\n', { mode: 0o644 });
    symlinkSync('libpq.so.5.18', join(native, 'lib', 'libpq.so'));
    // Listed but absent, as after an install that skipped scripts: the copy gets it made.
    writeFileSync(
      join(native, 'pg-symlinks.json'),
      JSON.stringify([{ source: 'native/lib/libpq.so.5.18', target: 'native/lib/libpq.so.5' }]),
    );
    copyRoot = join(dir, 'awa-pg-bin-test');
    lines.length = 0;
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  async function refusal(): Promise<BinaryCopyMismatchError> {
    const err: unknown = await copyBinaries(native, copyRoot, log).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BinaryCopyMismatchError);
    const e = err as BinaryCopyMismatchError;
    expect(e.code).toBe('AWA_EMBEDDED_START_FAILED');
    expect(e.copyDir).toBe(copyRoot);
    expect(e.message).toContain(`Remove ${copyRoot} and start again`);
    return e;
  }

  it('copies once, with the version links and no write access for others, then reuses the copy', async () => {
    const copied = await copyBinaries(native, copyRoot, log);
    expect(copied).toBe(join(copyRoot, 'native'));
    expect(
      readFileSync(join(copied, 'bin', 'postgres')).equals(readFileSync(join(native, 'bin', 'postgres'))),
    ).toBe(true);
    expect(readlinkSync(join(copied, 'lib', 'libpq.so.5'))).toBe('libpq.so.5.18');
    expect(readlinkSync(join(copied, 'lib', 'libpq.so'))).toBe('libpq.so.5.18');
    expect(lstatSync(copyRoot).mode & 0o777).toBe(0o755);
    expect(lines.filter((l) => l.startsWith('copying'))).toHaveLength(1);
    expect(await copyBinaries(native, copyRoot, log)).toBe(copied);
    expect(lines.filter((l) => l.startsWith('copying'))).toHaveLength(1);
  });

  it('launchers copying at the same moment all end with the same checked copy; no staging copy is left', async () => {
    const results = await Promise.all([1, 2, 3, 4].map(() => copyBinaries(native, copyRoot, log)));
    expect(new Set(results)).toEqual(new Set([join(copyRoot, 'native')]));
    expect(readdirSync(dir).sort()).toEqual(['awa-pg-bin-test', 'pkg']);
  });

  it('a copy whose binary was changed after it was made (same size) is refused before anything runs from it', async () => {
    await copyBinaries(native, copyRoot, log);
    const postgres = join(copyRoot, 'native', 'bin', 'postgres');
    const bytes = readFileSync(postgres);
    bytes[123_456] = bytes[123_456]! ^ 0xff;
    writeFileSync(postgres, bytes);
    expect((await refusal()).problem).toBe('bin/postgres differs from the source');
  });

  it('a truncated library, an extra library, a missing file or a redirected link in the copy is refused', async () => {
    const damage: [string, (copy: string) => void, string][] = [
      [
        'truncated',
        (c) => truncateSync(join(c, 'lib', 'libpq.so.5.18'), 10),
        'lib/libpq.so.5.18 has 10 bytes, the source 50000',
      ],
      [
        'extra',
        (c) => writeFileSync(join(c, 'lib', 'libc.so.6'), 'evil'),
        'lib/libc.so.6 is not in the source',
      ],
      ['missing', (c) => unlinkSync(join(c, 'bin', 'initdb')), 'bin/initdb is missing'],
      [
        'relinked',
        (c) => {
          unlinkSync(join(c, 'lib', 'libpq.so.5'));
          symlinkSync('/tmp/elsewhere.so', join(c, 'lib', 'libpq.so.5'));
        },
        'lib/libpq.so.5 links to /tmp/elsewhere.so, in the source to libpq.so.5.18',
      ],
      [
        'writable',
        (c) => chmodSync(join(c, 'bin', 'postgres'), 0o757),
        'bin/postgres is writable by group or others',
      ],
    ];
    for (const [what, harm, problem] of damage) {
      rmSync(copyRoot, { recursive: true, force: true });
      await copyBinaries(native, copyRoot, log);
      harm(join(copyRoot, 'native'));
      expect((await refusal()).problem, what).toBe(problem);
    }
  });

  it('a symlink planted at the copy name is refused, even to a faithful copy', async () => {
    const elsewhere = join(dir, 'planted');
    mkdirSync(elsewhere);
    cpSync(native, join(elsewhere, 'native'), { recursive: true, verbatimSymlinks: true });
    symlinkSync('libpq.so.5.18', join(elsewhere, 'native', 'lib', 'libpq.so.5'));
    symlinkSync(elsewhere, copyRoot);
    expect((await refusal()).problem).toBe(`${copyRoot} is a symlink`);
  });

  it.runIf(isRoot)('as root, a copy that belongs to another user is refused', async () => {
    await copyBinaries(native, copyRoot, log);
    chownSync(join(copyRoot, 'native', 'lib', 'libpq.so.5.18'), 65534, 65534);
    expect((await refusal()).problem).toBe('lib/libpq.so.5.18 belongs to uid 65534, not 0');
    chownSync(copyRoot, 65534, 65534);
    expect((await refusal()).problem).toBe(`${copyRoot} belongs to uid 65534, not 0`);
  });
});
