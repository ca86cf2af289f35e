// Where a command reads its environment and writes its output. The process entry (main.ts) passes the real
// process's; tests pass their own, so a command runs in-process and its output can be read back.

/** Anything with a write(text) method: a stream such as process.stdout, or a collector in a test. */
export interface TextSink {
  write(text: string): unknown;
}

export interface CliIo {
  env: Readonly<Record<string, string | undefined>>;
  stdout: TextSink;
  stderr: TextSink;
}

/** What a command gets: its environment, and one line at a time to print on stdout or stderr. */
export interface CliContext {
  env: Readonly<Record<string, string | undefined>>;
  /** Prints one line (a newline is added) on stdout. */
  out(line: string): void;
  /** Prints one line (a newline is added) on stderr. */
  err(line: string): void;
  /** Writes text as is on stdout. */
  write(text: string): void;
}

export function contextOf(io: CliIo): CliContext {
  return {
    env: io.env,
    out: (line) => void io.stdout.write(`${inert(line)}\n`),
    err: (line) => void io.stderr.write(`${inert(line)}\n`),
    write: (text) => void io.stdout.write(text),
  };
}

/**
 * Text as a terminal should show it, not obey it: C0 controls other than newline and tab, DEL and C1 controls
 * (which can clear the screen, retitle the window, move the cursor or forge a table row) become visible
 * escapes. Job error messages, args and names reach these lines from outside. JSON output is unchanged:
 * JSON.stringify already writes these characters as escapes.
 */
export function inert(text: string): string {
  return text.replace(
    // eslint-disable-next-line no-control-regex
    /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, '0')}`,
  );
}
