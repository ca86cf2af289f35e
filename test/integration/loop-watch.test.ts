// What the loop watch counts as a stall, in a process of its own: a loop that burned CPU is reported, however
// long the machine made it take; a process that was stopped (SIGSTOP) for longer than the threshold is not.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { until } from '../helpers/wait.js';

const FIXTURE = new URL('../fixtures/loop-watcher.ts', import.meta.url).pathname;

function watcher() {
  const proc = spawn(process.execPath, ['--import', 'tsx', FIXTURE], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines: string[] = [];
  createInterface({ input: proc.stdout! }).on('line', (l) => lines.push(l));
  const send = (line: string) => proc.stdin!.write(`${line}\n`);
  const stalls = () =>
    lines.filter((l) => l.includes('stalledMs')).map((l) => JSON.parse(l).stalledMs as number);
  return { proc, lines, send, stalls };
}

let running: ReturnType<typeof watcher> | null = null;
afterEach(() => {
  running?.proc.kill('SIGKILL');
  running = null;
});

describe('the loop watch', () => {
  it('reports a loop that burned CPU, and not a process that was stopped', async () => {
    const w = (running = watcher());
    await until('the watcher to start', async () => w.lines.includes('ready'), 20_000);
    // Stopped for three times the threshold: the loop stood still, but the process ran nothing.
    w.proc.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, 1_500));
    w.proc.kill('SIGCONT');
    // Then 800 ms of CPU on its loop; the line after it shows the stop was looked at before the spin.
    w.send('spin 800');
    await until('the spin to end', async () => w.lines.some((l) => l.includes('spun')), 20_000);
    await until('the stall to be reported', async () => w.stalls().length > 0, 10_000);
    expect(w.stalls()).toHaveLength(1);
    expect(w.stalls()[0]).toBeGreaterThanOrEqual(500);
    w.send('exit');
  });
});
