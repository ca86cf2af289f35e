import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { ResultRow } from './result-row.js';

// Results: one row per system per scenario, printed as a table (with awa/peer ratios) or as JSON lines,
// and optionally written to a directory with an HTML page of charts.

/** The run whose key is the median (lower middle for an even count), with every run's jobs/s attached. */
export function medianRun(runs: ResultRow[], key: (r: ResultRow) => number | null): ResultRow {
  const sorted = [...runs].sort((a, b) => (key(a) ?? 0) - (key(b) ?? 0));
  const mid = sorted[Math.floor((sorted.length - 1) / 2)]!;
  return { ...mid, runs: runs.length, runJobsPerSec: runs.map((r) => r.jobsPerSec) };
}

export function jsonLine(row: ResultRow): string {
  return JSON.stringify(row);
}

const COLUMNS: [string, (r: ResultRow) => unknown][] = [
  ['system', (r) => r.system],
  ['jobs', (r) => r.jobs],
  ['conc', (r) => r.concurrency],
  ['seconds', (r) => r.seconds],
  ['jobs/s', (r) => r.jobsPerSec],
  ['p50 ms', (r) => r.p50Ms],
  ['p95 ms', (r) => r.p95Ms],
  ['p99 ms', (r) => r.p99Ms],
  ['max ms', (r) => r.maxMs],
  ['dead', (r) => r.deadTuples],
  ['live', (r) => r.liveTuples],
  ['rss MB', (r) => r.peakRssMb],
];

function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (typeof v === 'number')
    return v.toLocaleString('en-US', { maximumFractionDigits: v < 10 ? 2 : v < 100 ? 1 : 0 });
  return String(v);
}

export function formatTable(scenario: string, rows: ResultRow[]): string {
  const cells = rows.map((r) => COLUMNS.map(([, get]) => cell(get(r))));
  const widths = COLUMNS.map(([h], i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) =>
    c.map((s, i) => (i === 0 ? s.padEnd(widths[i]!) : s.padStart(widths[i]!))).join('  ');
  const runs = rows[0]?.runs ?? 1;
  const out = [
    `\n${scenario}${runs > 1 ? ` (median of ${runs} runs)` : ''}`,
    line(COLUMNS.map(([h]) => h)),
    ...cells.map(line),
  ];
  for (const r of rows) {
    const extra = summariseExtra(r.extra);
    if (extra) out.push(`  ${r.system}: ${extra}`);
  }
  out.push(...ratioLines(scenario, rows));
  return out.join('\n');
}

/** Scalar extras, plus flat objects of numbers (awa's maintenance counters); series and tables stay in JSON. */
function summariseExtra(extra: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(extra)) {
    if (typeof v === 'number' || typeof v === 'string') parts.push(`${k} ${cell(v)}`);
    else if (v && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k2, v2] of Object.entries(v)) if (typeof v2 === 'number') parts.push(`${k2} ${cell(v2)}`);
    } else if (Array.isArray(v) && k === 'tasks') {
      for (const t of v as { task: string; opsPerSec?: number; p99Us?: number }[]) {
        parts.push(`\n    ${t.task}: ${cell(t.opsPerSec)} ops/s, p99 ${cell(t.p99Us)} µs`);
      }
    }
  }
  return parts.join(', ').replace(/, \n/g, '\n');
}

/** awa/peer: throughput ratios (higher is better for awa), latency as peer/awa (same direction). */
export function ratioLines(scenario: string, rows: ResultRow[]): string[] {
  const awa = rows.find((r) => r.system === 'awa');
  if (!awa) return [];
  const out: string[] = [];
  for (const peer of rows.filter((r) => r !== awa)) {
    const parts: string[] = [];
    const ratio = (a: number | null, b: number | null) => (a && b ? `${(a / b).toFixed(2)}×` : 'n/a');
    if (scenario === 'latency') {
      parts.push(
        `pickup p50 ${ratio(peer.p50Ms, awa.p50Ms)} lower`,
        `p99 ${ratio(peer.p99Ms, awa.p99Ms)} lower`,
      );
    } else if (scenario !== 'micro') {
      parts.push(`throughput ${ratio(awa.jobsPerSec, peer.jobsPerSec)}`);
      if (scenario === 'pinned' || scenario === 'soak') {
        const last = (r: ResultRow) => (r.extra.lastIntervalJobsPerSec as number | undefined) ?? null;
        parts.push(`last interval ${ratio(last(awa), last(peer))}`);
      }
    }
    if (parts.length) out.push(`  awa/${peer.system}: ${parts.join(', ')}`);
  }
  return out;
}

/** Writes results.jsonl and report.html (Vega-Lite charts, loaded from a CDN when the page is opened). */
export async function writeReportDir(dir: string, rows: ResultRow[]): Promise<void> {
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'results.jsonl'), rows.map(jsonLine).join('\n') + '\n');
  const { reportHtml } = await import('./report-html.js');
  await writeFile(join(dir, 'report.html'), reportHtml(rows));
}
