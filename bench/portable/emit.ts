// The JSONL output: stdout carries only protocol lines (one JSON object each); logs go to stderr.

export const SYSTEM = 'awa-node';

export function writeLine(obj: Record<string, unknown>): void {
  process.stdout.write(JSON.stringify(obj) + '\n');
}

export function metric(t: Date, name: string, value: number | null, windowS: number): void {
  if (value === null || !Number.isFinite(value)) return; // no sample in the window: say nothing
  writeLine({
    t: t.toISOString(),
    system: SYSTEM,
    kind: 'adapter',
    subject_kind: 'adapter',
    subject: '',
    metric: name,
    value: Math.round(value * 1000) / 1000,
    window_s: windowS,
  });
}

export function log(line: string): void {
  process.stderr.write(`[awa-node adapter ${process.pid}] ${line}\n`);
}
