import { Hono, type Context } from 'hono';
import { AUDIT_ACTION_PATTERN, type Actor } from '../../model/audit.js';
import { InvalidRequestError } from '../../model/errors.js';
import type { LimitsOverride } from '../../model/limits.js';
import type { JobSummary } from '../../storage/index.js';
import type { DashboardClient } from './config.js';
import * as input from './input.js';

// The dashboard's JSON API: reads through the client, each one paged or bounded (no read walks history row
// by row), and actions as POSTs with JSON bodies. Authentication and CSRF are checked before these routes
// run (see app.ts); these handlers only validate and delegate. Each action passes the logged-in user and the
// client's address (set by app.ts as `actor`) for its audit record.

/** What app.ts hands each request: who is acting, and from where. */
export type ApiEnv = { Variables: { actor: Actor } };

export interface JobPage {
  jobs: JobSummary[];
  /** The query parameters of the next (older) page, or null when this was the last. */
  next: { beforeId: string } | { before: string } | null;
  /** What the search cannot see, when there is such a part: completed jobs kept without their kind. */
  note: string | null;
}

export function createApi(client: DashboardClient): Hono<ApiEnv> {
  const api = new Hono<ApiEnv>();
  const by = (c: Context<ApiEnv>) => ({ actor: c.get('actor') });

  api.get('/queues', async (c) => {
    const q = c.req.query();
    input.knownParams(q, ['windowMs', 'limits']);
    const windowMs = q.windowMs === undefined ? 60_000 : input.int('windowMs', q.windowMs, 1_000, 86_400_000);
    // limits=1: every limited queue's limits too, without keys (the list's "limits" column), in the same answer
    // so that the list's poll stays one request.
    const withLimits = q.limits === undefined ? false : input.flag('limits', q.limits);
    const [queues, limits] = await Promise.all([
      client.queueHealth({ windowMs }),
      withLimits ? client.queueLimits({ keys: 0 }) : null,
    ]);
    return c.json({ at: new Date().toISOString(), windowMs, queues, ...(limits ? { limits } : {}) });
  });

  api.post('/queues/:queue/:action{pause|resume}', async (c) => {
    const queue = input.name('queue', c.req.param('queue'));
    input.emptyBody(await input.jsonBody(c.req.raw));
    const pause = c.req.param('action') === 'pause';
    const changed = pause ? await client.pauseQueue(queue, by(c)) : await client.resumeQueue(queue, by(c));
    return c.json({ queue, paused: pause, changed });
  });

  // Flow control (docs/dashboard.md, "Limits on the queue page"): one queue's limits with its busiest keys, and
  // an operator's override of what the hosts declared.
  api.get('/queues/:queue/limits', async (c) => {
    const q = c.req.query();
    input.knownParams(q, ['keys']);
    const queue = input.name('queue', c.req.param('queue'));
    const keys = q.keys === undefined ? 20 : input.int('keys', q.keys, 0, MAX_LIMIT_KEYS);
    // A queue without limits (or that nothing names) answers null: the page offers to set some.
    const [limits] = await client.queueLimits({ queue, keys });
    return c.json({ queue, limits: limits ?? null });
  });

  api.post('/queues/:queue/limits', async (c) => {
    const queue = input.name('queue', c.req.param('queue'));
    const override = input.limitsOverride(await input.jsonBody(c.req.raw));
    // The client checks the override and names a bad field (answered 400 with it).
    const effective = await client.setQueueLimits(queue, override as LimitsOverride | null, by(c));
    return c.json({ queue, override, effective });
  });

  api.get('/jobs', async (c) => c.json(await searchJobs(client, input.jobSearch(c.req.query()))));

  api.get('/jobs/:id', async (c) => {
    input.knownParams(c.req.query(), []);
    const id = input.jobId('id', c.req.param('id'));
    const [job, progress] = await Promise.all([client.getJob(id), client.jobProgress(id)]);
    if (!job) return c.json({ error: 'not_found', message: `job ${id} is unknown or past retention` }, 404);
    return c.json({ job, progress });
  });

  api.post('/jobs/:id/cancel', async (c) => {
    const id = input.jobId('id', c.req.param('id'));
    input.emptyBody(await input.jsonBody(c.req.raw));
    return c.json({ id, cancelledFrom: await client.cancel(id, 'cancelled from the dashboard', by(c)) });
  });

  api.post('/jobs/:id/retry', async (c) => {
    const id = input.jobId('id', c.req.param('id'));
    input.emptyBody(await input.jsonBody(c.req.raw));
    return c.json({ id, ...(await client.retryJob(id, by(c))) });
  });

  // The DLQ page: entries newest first (keyset on beforeId) with why each went there, and how many there are in
  // all and under the filter, each count bounded so that a huge DLQ costs no more to show.
  api.get('/dlq', async (c) => {
    const q = c.req.query();
    input.knownParams(q, ['queue', 'kind', 'beforeId', 'limit']);
    const s = input.jobSearch({ ...q, state: 'dlq' });
    const filter = { ...(s.queue ? { queue: s.queue } : {}), ...(s.kind ? { kind: s.kind } : {}) };
    const filtered = s.queue !== undefined || s.kind !== undefined;
    const [jobs, total, matching] = await Promise.all([
      client.dlqPage({ ...filter, ...(s.beforeId ? { beforeId: s.beforeId } : {}), limit: s.limit }),
      client.countDlq({}, { atMost: DLQ_COUNT_BOUND }),
      filtered ? client.countDlq(filter, { atMost: DLQ_COUNT_BOUND }) : null,
    ]);
    const last = jobs.at(-1);
    const next = last && jobs.length === s.limit ? { beforeId: last.id } : null;
    return c.json({ jobs, next, total, matching: matching ?? total });
  });

  api.post('/dlq/retry', async (c) => {
    const ids = input.idList(await input.jsonBody(c.req.raw));
    return c.json({ retried: await client.retryDlq(ids, by(c)) });
  });

  api.post('/dlq/purge', async (c) => {
    const ids = input.idList(await input.jsonBody(c.req.raw));
    return c.json({ purged: await client.purgeDlq({ ids }, by(c)) });
  });

  api.get('/runtimes', async (c) => {
    input.knownParams(c.req.query(), []);
    const runtimes = await client.runtimeList();
    const leader = runtimes.find((r) => r.live && r.isLeader)?.instanceId ?? null;
    return c.json({ runtimes, leader });
  });

  api.get('/cron', async (c) => {
    input.knownParams(c.req.query(), []);
    return c.json({ schedules: await client.listCron() });
  });

  // Flows (docs/flows.md): a page of them newest first, one with its jobs and edges, and cancelling one.
  api.get('/flows', async (c) => {
    const q = c.req.query();
    input.knownParams(q, ['beforeId', 'limit']);
    const limit = q.limit === undefined ? 50 : input.int('limit', q.limit, 1, 200);
    const flows = await client.listFlows({
      limit,
      ...(q.beforeId !== undefined ? { beforeId: input.jobId('beforeId', q.beforeId) } : {}),
    });
    const last = flows.at(-1);
    return c.json({ flows, next: last && flows.length === limit ? { beforeId: last.flowId } : null });
  });

  api.get('/flows/:id', async (c) => {
    input.knownParams(c.req.query(), []);
    const id = input.jobId('id', c.req.param('id'));
    const flow = await client.getFlow(id);
    if (!flow) return c.json({ error: 'not_found', message: `flow ${id} is unknown` }, 404);
    return c.json({ flow });
  });

  api.post('/flows/:id/cancel', async (c) => {
    const id = input.jobId('id', c.req.param('id'));
    input.emptyBody(await input.jsonBody(c.req.raw));
    const cancelled = await client.cancelFlow(id, 'cancelled from the dashboard', by(c));
    if (cancelled === null) return c.json({ error: 'not_found', message: `flow ${id} is unknown` }, 404);
    return c.json({ flowId: id, cancelled });
  });

  // Where the pages are read from, and how far behind the primary (a read replica's replay delay).
  api.get('/reads', async (c) => {
    input.knownParams(c.req.query(), []);
    return c.json(await client.readLag());
  });

  api.get('/storage', async (c) => {
    input.knownParams(c.req.query(), []);
    const [ring, tables] = await Promise.all([client.ringStatus(), client.storageStatus()]);
    return c.json({ ring, tables });
  });

  // The audit trail, newest first; `next` is the cursor of the older page.
  api.get('/audit', async (c) => {
    const q = c.req.query();
    input.knownParams(q, ['beforeId', 'action', 'actor', 'limit']);
    if (q.action !== undefined && !AUDIT_ACTION_PATTERN.test(q.action))
      throw new InvalidRequestError('action', 'must be an action name such as queue.pause');
    const limit = q.limit === undefined ? 50 : input.int('limit', q.limit, 1, 200);
    const records = await client.auditLog({
      limit,
      ...(q.beforeId !== undefined ? { beforeId: input.jobId('beforeId', q.beforeId) } : {}),
      ...(q.action !== undefined ? { action: q.action } : {}),
      ...(q.actor !== undefined ? { actor: input.name('actor', q.actor) } : {}),
    });
    const last = records.at(-1);
    return c.json({ records, next: last && records.length === limit ? { beforeId: last.id } : null });
  });

  api.all('*', (c: Context) => c.json({ error: 'not_found' }, 404));
  return api;
}

/** The most keys one limits read lists (the client's bound). */
const MAX_LIMIT_KEYS = 1000;

/** DLQ totals are counted up to this many entries; the page shows "≥ N" past it. */
export const DLQ_COUNT_BOUND = 10_000;

/** The most rows one page may grow to when a settle flush shares a millisecond (the client's limit). */
const MAX_WIDENED_PAGE = 1000;

/**
 * One page of a job search. States listed by id page on `beforeId`; completed jobs are listed by completion
 * time and page on `before`. Jobs of one settle flush share a time, so the next page starts 1 ms after
 * the last one shown (the browser drops the repeats) rather than skipping the flush's remaining members; and a
 * page whose rows all share one millisecond is widened (up to 1000 rows) until it reaches an older one, so the
 * cursor always moves. Only a flush of more than 1000 jobs in one millisecond can still be cut.
 */
export async function searchJobs(client: DashboardClient, s: input.JobSearch): Promise<JobPage> {
  const byTime = s.state === 'completed';
  // The time window and every filter go to the database, which applies them before the limit.
  let before = s.before;
  if (s.to) {
    const end = new Date(s.to.getTime() + 1);
    if (!before || end < before) before = end;
  }
  let limit = s.limit;
  let rows: JobSummary[];
  for (;;) {
    rows = await client.listJobs({
      state: s.state,
      queue: s.queue,
      kind: s.kind,
      limit,
      ...(before ? { beforeAt: before } : {}),
      ...(s.from ? { afterAt: s.from } : {}),
      ...(byTime ? {} : { beforeId: s.beforeId }),
    });
    if (!byTime || rows.length < limit || limit >= MAX_WIDENED_PAGE || !oneMillisecond(rows)) break;
    limit = Math.min(limit * 4, MAX_WIDENED_PAGE);
  }
  const last = rows.at(-1);
  // 'available' lists each lane's next jobs only: there is no deeper page to ask for.
  let next: JobPage['next'] = null;
  if (last && rows.length === limit && s.state !== 'available') {
    if (!byTime) next = { beforeId: last.id };
    else if (!s.from || last.at >= s.from) {
      const stuck = oneMillisecond(rows);
      next = { before: new Date(last.at.getTime() + (stuck ? 0 : 1)).toISOString() };
    }
  }
  return { jobs: rows, next, note: s.state === 'completed' && s.kind ? await kindlessNote(client, s) : null };
}

/** Completed jobs whose rows were pruned are kept as ids in compact history, without their kind: a kind filter
 * cannot find them, and the page says so rather than "no jobs match". */
async function kindlessNote(client: DashboardClient, s: input.JobSearch): Promise<string | null> {
  const span = await client.compactHistorySpan(s.queue);
  if (!span || (s.from && span.newest < s.from) || (s.to && span.oldest > s.to)) return null;
  return (
    `completed jobs closed from ${span.oldest.toISOString()} to ${span.newest.toISOString()} are kept ` +
    'without their kind (compact history): a kind filter cannot find them'
  );
}

function oneMillisecond(rows: readonly JobSummary[]): boolean {
  return rows.length > 0 && rows[0]!.at.getTime() === rows.at(-1)!.at.getTime();
}
