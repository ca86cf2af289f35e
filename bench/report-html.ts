import type { ResultRow } from './result-row.js';

// The charts of `--report DIR`: a static page whose data is inlined and drawn by Vega-Lite (a maintained
// declarative charting library) through vega-embed, fetched from jsDelivr when the page is opened.

interface SeriesPoint {
  t: number;
  jobsPerSec: number;
  dead: number;
  depth: number;
  bytes: number;
}

function seriesRows(rows: ResultRow[]) {
  return rows.flatMap((r) =>
    ((r.extra.series as SeriesPoint[] | undefined) ?? []).map((p) => ({
      scenario: r.scenario,
      system: r.system,
      ...p,
    })),
  );
}

function line(title: string, data: unknown[], field: string, yTitle: string) {
  return {
    title,
    width: 560,
    height: 240,
    data: { values: data },
    mark: { type: 'line', point: true },
    encoding: {
      x: { field: 't', type: 'quantitative', title: 'seconds' },
      y: { field, type: 'quantitative', title: yTitle },
      color: { field: 'system', type: 'nominal' },
      strokeDash: { field: 'scenario', type: 'nominal' },
    },
  };
}

function bars(title: string, data: unknown[], y: string, yTitle: string, column?: string) {
  return {
    title,
    data: { values: data },
    mark: 'bar',
    encoding: {
      x: { field: 'system', type: 'nominal' },
      y: { field: y, type: 'quantitative', title: yTitle },
      color: { field: 'system', type: 'nominal' },
      ...(column ? { column: { field: column, type: 'nominal' } } : {}),
    },
  };
}

export function reportHtml(rows: ResultRow[]): string {
  const series = seriesRows(rows);
  const throughput = rows.filter((r) => r.jobsPerSec !== null && r.scenario !== 'micro');
  const latency = rows.flatMap((r) =>
    r.p50Ms === null
      ? []
      : (['p50Ms', 'p95Ms', 'p99Ms'] as const).map((p) => ({ system: r.system, percentile: p, ms: r[p] })),
  );
  const specs = [
    throughput.length && bars('Throughput (jobs/s)', throughput, 'jobsPerSec', 'jobs/s', 'scenario'),
    series.length && line('Throughput over time', series, 'jobsPerSec', 'jobs/s'),
    series.length && line('Dead tuples over time (all tables of the schema)', series, 'dead', 'dead tuples'),
    series.length && line('Table size over time', series, 'bytes', 'bytes'),
    latency.length && bars('Pickup latency percentiles', latency, 'ms', 'ms', 'percentile'),
  ].filter(Boolean);
  const divs = specs.map((_, i) => `<div id="c${i}"></div>`).join('\n');
  const embeds = specs.map((s, i) => `vegaEmbed('#c${i}', ${JSON.stringify(s)});`).join('\n');
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>awa bench</title>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-lite@5"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-embed@6"></script>
</head><body style="font-family: sans-serif">
<h1>awa bench</h1>
<pre>${escapeHtml(JSON.stringify(rows[0]?.environment ?? {}, null, 2))}</pre>
${divs}
<script>${embeds}</script>
</body></html>
`;
}

function escapeHtml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
