import type { JobRecord } from '../storage/index.js';
import type { EnqueuedMatch } from './enqueued-match.js';
import type { Mismatch } from './match.js';
import { jobs, show, showJob } from './show.js';

// The messages of a failed expectEnqueued() / expectNotEnqueued(): what was asked, then what was there instead,
// job by job, each with the fields where it differs. Read in a terminal, so a long list is cut short.

/** Jobs listed in full before the rest are summed up. */
const LISTED = 10;

export interface Candidate {
  job: JobRecord;
  differences: Mismatch[];
}

/** `a job of kind "send_email" with args {...}, queue "mail"`. */
export function asked(kind: string, match: EnqueuedMatch, count?: number): string {
  const parts: string[] = [];
  if (match.args !== undefined) parts.push(`args ${show(match.args)}`);
  if (match.queue !== undefined) parts.push(`queue ${JSON.stringify(match.queue)}`);
  if (match.priority !== undefined) parts.push(`priority ${match.priority}`);
  if (match.scheduled !== undefined) parts.push(`scheduled ${show(match.scheduled)}`);
  const what = count === undefined ? 'a job' : `exactly ${jobs(count)}`;
  return `${what} of kind ${JSON.stringify(kind)}${parts.length ? ` with ${parts.join(', ')}` : ''}`;
}

function difference(m: Mismatch): string {
  return `${m.path}: expected ${show(m.expected)}, got ${m.missing ? 'no such key' : show(m.actual)}`;
}

function listed(candidates: readonly Candidate[]): string {
  const lines = candidates
    .slice(0, LISTED)
    .flatMap((c) => [
      `  ${showJob(c.job)}`,
      ...(c.differences.length === 0 ? ['    matches'] : c.differences.map((m) => `    ${difference(m)}`)),
    ]);
  if (candidates.length > LISTED) lines.push(`  … and ${jobs(candidates.length - LISTED)} more`);
  return lines.join('\n');
}

function otherKinds(kinds: readonly { kind: string; jobs: number }[]): string {
  if (kinds.length === 0) return 'Nothing was enqueued there.';
  const each = kinds.map((k) => `${jobs(k.jobs)} of kind ${JSON.stringify(k.kind)}`);
  return `Enqueued there: ${each.join(', ')}.`;
}

/** expectEnqueued() found no job of the kind at all. */
export function noneOfKind(
  kind: string,
  match: EnqueuedMatch,
  where: string,
  kinds: readonly { kind: string; jobs: number }[],
): string {
  return (
    `expectEnqueued: expected ${asked(kind, match, match.count)} in ${where}, but no job of that kind ` +
    `was enqueued. ${otherKinds(kinds)}`
  );
}

/** expectEnqueued() found jobs of the kind, but not as many matching as it was told. */
export function noMatch(kind: string, match: EnqueuedMatch, where: string, candidates: Candidate[]): string {
  const matching = candidates.filter((c) => c.differences.length === 0).length;
  const found =
    match.count === undefined
      ? `none of the ${jobs(candidates.length)} of that kind matches`
      : `${matching} of the ${jobs(candidates.length)} of that kind match${matching === 1 ? 'es' : ''}`;
  return `expectEnqueued: expected ${asked(kind, match, match.count)} in ${where}, but ${found}:\n${listed(candidates)}`;
}

/** expectNotEnqueued() found jobs it was told not to. */
export function unexpected(kind: string, match: EnqueuedMatch, where: string, matching: Candidate[]): string {
  const what = asked(kind, match).replace(/^a job/, 'no job');
  return `expectNotEnqueued: expected ${what} in ${where}, but ${jobs(matching.length)} match${matching.length === 1 ? 'es' : ''}:\n${listed(matching)}`;
}
