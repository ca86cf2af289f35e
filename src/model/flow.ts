import { InvalidOptionError } from './errors.js';
import type { JobOptions } from './enqueue-options.js';
import type { JobKind } from './job-kind.js';
import { rejectUnknownKeys, validateJobId, validateName, validatePlainObject } from './validation.js';

// Flows (docs/flows.md, "Dependencies"): jobs enqueued together, each naming the jobs it runs after. This file
// checks a flow as the caller wrote it, before anything is encoded: names, dependencies and the graph (no
// cycle, nothing unknown), and turns it into positions the storage layer writes in one statement.

/** What a dependent does when a job it depends on ends without completing (failed, dead-lettered, cancelled,
 * or itself failed or skipped for its own dependencies). */
export type OnDependencyFailure = 'fail' | 'skip' | 'run';

/** A dependency: another job of the flow by its name, or any job by its id. */
export type FlowDependency =
  | string
  | { name: string; onFailure?: OnDependencyFailure }
  | { id: string; onFailure?: OnDependencyFailure };

export interface FlowJobInput<Args = unknown> {
  /** The job's name in the flow: what other jobs depend on, and what getFlow() shows. */
  name: string;
  kind: JobKind<Args> | string;
  args: Args;
  /** As enqueue()'s, except `unique` (a flow's jobs are its own). `runAt` of a dependent: no earlier than this,
   * once its dependencies allow it. */
  options?: Omit<JobOptions, 'unique'>;
  /** Jobs that must end before this one runs. Default policy: `fail`. */
  dependsOn?: readonly FlowDependency[];
}

export interface FlowInput {
  /** A name for people (getFlow(), the CLI, the dashboard). */
  name?: string;
  jobs: readonly FlowJobInput[];
}

/** A job this job depends on (or spawned), as its handler reads it: ctx.dependencies(), ctx.waitForChildren(). */
export interface DependencyOutcome {
  id: string;
  /** Its name in the flow; null for a job outside it. */
  name: string | null;
  onFailure: OnDependencyFailure;
  /** How it ended: completed, failed (or dead-lettered), cancelled (or skipped); null while it has not. */
  outcome: 'completed' | 'failed' | 'cancelled' | null;
  /** A child this job spawned (ctx.spawn()), rather than a job it was enqueued to run after. */
  spawned: boolean;
  /** Its stored result, when it completed with one (docs/flows.md, "Results"). */
  result: unknown;
}

/** One edge: job `from` (a position in the flow) runs after position `to`, or after the outside job `id`. */
export interface FlowEdge {
  from: number;
  to: number | null;
  id: string | null;
  onFailure: OnDependencyFailure;
}

export interface CheckedFlow {
  name: string | null;
  jobs: readonly FlowJobInput[];
  edges: FlowEdge[];
}

/** Most jobs one flow may hold. */
export const MAX_FLOW_JOBS = 100_000;
const POLICIES: readonly OnDependencyFailure[] = ['fail', 'skip', 'run'];

/** Checks the flow and returns its edges by position; every problem is an InvalidOptionError naming the field. */
export function checkFlow(input: FlowInput): CheckedFlow {
  validatePlainObject('flow', input);
  rejectUnknownKeys('flow', input, ['name', 'jobs']);
  const name = input.name === undefined ? null : validateName('flow.name', input.name);
  if (!Array.isArray(input.jobs) || input.jobs.length === 0 || input.jobs.length > MAX_FLOW_JOBS)
    throw new InvalidOptionError('flow.jobs', `must be an array of 1 to ${MAX_FLOW_JOBS} jobs`);
  const jobs = input.jobs as readonly FlowJobInput[];
  const position = new Map<string, number>();
  jobs.forEach((job, i) => {
    validatePlainObject(`flow.jobs[${i}]`, job);
    rejectUnknownKeys(`flow.jobs[${i}]`, job, ['name', 'kind', 'args', 'options', 'dependsOn']);
    const jobName = validateName(`flow.jobs[${i}].name`, job.name);
    if (position.has(jobName))
      throw new InvalidOptionError(`flow.jobs[${i}].name`, `"${jobName}" names two jobs of the flow`);
    position.set(jobName, i);
    if (job.options !== undefined && (job.options as { unique?: unknown }).unique !== undefined)
      throw new InvalidOptionError(`flow.jobs[${i}].options.unique`, "a flow's jobs cannot be unique");
  });
  const edges = jobs.flatMap((job, i) => edgesOf(job, i, position));
  assertAcyclic(jobs, edges);
  return { name, jobs, edges };
}

function edgesOf(job: FlowJobInput, from: number, position: ReadonlyMap<string, number>): FlowEdge[] {
  const field = `flow.jobs[${from}].dependsOn`;
  if (job.dependsOn === undefined) return [];
  if (!Array.isArray(job.dependsOn)) throw new InvalidOptionError(field, 'must be an array');
  const seen = new Set<string>();
  return job.dependsOn.map((dep: FlowDependency, k: number) => {
    const at = `${field}[${k}]`;
    const spec = typeof dep === 'string' ? { name: dep } : dep;
    validatePlainObject(at, spec);
    rejectUnknownKeys(at, spec, ['name', 'id', 'onFailure']);
    const onFailure = (spec as { onFailure?: OnDependencyFailure }).onFailure ?? 'fail';
    if (!POLICIES.includes(onFailure))
      throw new InvalidOptionError(`${at}.onFailure`, `must be one of ${POLICIES.join(', ')}`);
    const hasName = 'name' in spec && spec.name !== undefined;
    const hasId = 'id' in spec && spec.id !== undefined;
    if (hasName === hasId)
      throw new InvalidOptionError(at, 'must name a job of the flow or give a job id, not both');
    let edge: FlowEdge;
    if (hasName) {
      const to = position.get(spec.name);
      if (to === undefined)
        throw new InvalidOptionError(at, `"${String(spec.name)}" is not the name of a job of this flow`);
      if (to === from) throw new InvalidOptionError(at, 'a job cannot depend on itself');
      edge = { from, to, id: null, onFailure };
    } else {
      edge = { from, to: null, id: validateJobId(`${at}.id`, (spec as { id: string }).id), onFailure };
    }
    const key = edge.to === null ? `id:${edge.id}` : `pos:${edge.to}`;
    if (seen.has(key)) throw new InvalidOptionError(at, 'names a dependency twice');
    seen.add(key);
    return edge;
  });
}

/** Refuses a cycle among the flow's jobs (Kahn's order: whatever never becomes free is on a cycle). */
function assertAcyclic(jobs: readonly FlowJobInput[], edges: readonly FlowEdge[]): void {
  const waiting = new Array<number>(jobs.length).fill(0);
  const after = jobs.map((): number[] => []);
  for (const e of edges) {
    if (e.to === null) continue;
    waiting[e.from]!++;
    after[e.to]!.push(e.from);
  }
  const free = waiting.flatMap((n, i) => (n === 0 ? [i] : []));
  let done = 0;
  while (free.length > 0) {
    const i = free.pop()!;
    done++;
    for (const j of after[i]!) if (--waiting[j]! === 0) free.push(j);
  }
  if (done < jobs.length) {
    const stuck = waiting.findIndex((n) => n > 0);
    throw new InvalidOptionError(
      `flow.jobs[${stuck}].dependsOn`,
      `"${jobs[stuck]!.name}" is on a cycle of dependencies: no job of a cycle could ever run`,
    );
  }
}
