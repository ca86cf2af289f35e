import { describe, expect, it } from 'vitest';
import { contextOf, inert } from '../../src/cli/io.js';
import { InvalidOptionError } from '../../src/index.js';
import { validateName } from '../../src/model/validation.js';

// What the CLI prints for people is shown by a terminal, never obeyed: text from outside (a job's error
// message, its args, a name) can carry control sequences that clear the screen, retitle the window or forge
// table rows.

describe('terminal output', () => {
  it('turns C0 controls (but newline and tab), DEL and C1 controls into visible escapes', () => {
    const hostile = 'boom\u001b]0;TITLE\u0007\u001b[2J\rforged | row\u007f\u009b31m';
    expect(inert(hostile)).toBe('boom\\x1b]0;TITLE\\x07\\x1b[2J\\x0dforged | row\\x7f\\x9b31m');
    expect(inert('line one\nline\ttwo: ünïcødé ✓')).toBe('line one\nline\ttwo: ünïcødé ✓');
  });

  it('escapes every human line a command prints, on stdout and stderr; raw text (SQL) is left alone', () => {
    const out: string[] = [];
    const err: string[] = [];
    const ctx = contextOf({
      env: {},
      stdout: { write: (t: string) => out.push(t) },
      stderr: { write: (t: string) => err.push(t) },
    });
    ctx.out('error: \u001b[2J');
    ctx.err('\u0007bell');
    ctx.write('select 1;\n');
    expect(out).toEqual(['error: \\x1b[2J\n', 'select 1;\n']);
    expect(err).toEqual(['\\x07bell\n']);
  });

  it('refuses C0, DEL and C1 controls in queue and kind names', () => {
    for (const bad of ['a\u0000b', 'q\u001b[2J', 'del\u007f', 'csi\u009b', 'nel\u0085'])
      expect(() => validateName('queue', bad)).toThrow(InvalidOptionError);
    expect(validateName('queue', 'mail-ünïcødé.v2')).toBe('mail-ünïcødé.v2');
  });
});
