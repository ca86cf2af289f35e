// One run of the flow-control proof on a fleet (bench/limits/fleet.ts): enqueue a set of jobs, sample running
// attempts per key and collect the database's starts while they drain, SIGKILL hosts on the way if asked (each
// replaced by a new one), and read every job's end. The chaos test asserts on what this returns; the bench
// scenario reports it.
import type pg from 'pg';
import type { ServerCpu } from '../server-cpu.js';
import type { AwaClient } from '../../src/index.js';
import { LIMITED_KINDS, type LimitedQueue } from './jobs.js';
import { RunningSampler, StartsCollector, samplerClient, type LimitedFleet } from './fleet.js';

export interface PlannedJob {
  queue: LimitedQueue;
  tenant: string;
  sleepMs?: number;
}

export interface RunSpec {
  jobs: readonly PlannedJob[];
  /** For each: this many ms after the enqueue, as soon as a live host has attempts running in the database,
   * SIGKILL it and start a replacement at once. */
  killAfterMs?: readonly number[];
  timeoutMs: number;
  /** How often the running attempts per key are sampled. */
  sampleEveryMs?: number;
  /** How often the claim receipts are read (they must be read before the ring prunes their slot). */
  readStartsEveryMs?: number;
  /** When given, the run's CPU time (RunResult.cpu) is read from these processes. */
  serverCpu?: ServerCpu | null;
}

/** CPU the server's processes and the live hosts used from just before the enqueue until every job had ended
 * (as the run saw it, within one poll of the last end), and that stretch's length. */
export interface RunCpu {
  serverMs: number;
  hostsMs: number;
  wallMs: number;
}

export interface JobEnd {
  state: string;
  attempt: number;
  errors: string[];
}

export interface RunResult {
  /** Job ids in enqueue order (the plan's order). */
  ids: string[];
  enqueuedAt: number;
  /** The last job's finished_at (epoch ms). */
  drainedAt: number;
  seconds: number;
  starts: StartsCollector;
  running: RunningSampler;
  /** Hosts killed (instance ids), when, and the jobs the database showed them running when they died. */
  kills: { instance: string; at: number; runningIds: string[] }[];
  /** Jobs that did not complete (failed, cancelled, dead-lettered), from the counts: 0 when none is lost. */
  notCompleted: number;
  ends: Map<string, JobEnd>;
  /** Of `ends`, those read from compact history (their ring slot pruned during the run). */
  endsFromHistory: number;
  /** Only when the spec gave serverCpu and no host was killed (a killed host's time is lost with it). */
  cpu?: RunCpu;
}

const CHUNK = 2_000;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Jobs of `queues` that ended, and those that completed, from the counts (every plane: ring and history). */
async function ended(
  client: AwaClient,
  queues: readonly string[],
): Promise<{ ended: number; completed: number }> {
  const counts = (await client.counts()).filter((c) => queues.includes(c.queue));
  return {
    ended: counts.reduce((n, c) => n + c.completed + c.failed + c.cancelled + c.dlq, 0),
    completed: counts.reduce((n, c) => n + c.completed, 0),
  };
}

/** The live host with the most attempts running in the database now, if any has one. */
async function busiestHost(
  db: pg.Client,
  schema: string,
  queues: readonly string[],
  alive: readonly string[],
) {
  const { rows } = await db.query<{ host: string }>(
    `select claimed_by as host from ${schema}.jobs
      where state = 'running' and queue = any($1) and claimed_by = any($2) group by 1 order by count(*) desc limit 1`,
    [queues, alive],
  );
  return rows[0]?.host;
}

/** The jobs a host's attempts are running, in the database. */
async function runningOn(db: pg.Client, schema: string, queues: readonly string[], host: string) {
  const { rows } = await db.query<{ id: string }>(
    `select id::text as id from ${schema}.jobs where state = 'running' and queue = any($1) and claimed_by = $2`,
    [queues, host],
  );
  return rows.map((r) => r.id);
}

/**
 * SIGKILLs the live host with the most attempts running, and returns the jobs it was running. It is stopped
 * (SIGSTOP) first and its running attempts read while it cannot finish any: then exactly those die with it (a
 * commit it sent just before the stop is let land first). A stop that finds none is undone and tried again,
 * until `over()`.
 */
async function killBusiest(
  fleet: LimitedFleet,
  db: pg.Client,
  schema: string,
  queues: readonly string[],
  over: () => boolean,
) {
  while (!over()) {
    const host = await busiestHost(
      db,
      schema,
      queues,
      fleet.alive().map((h) => h.instanceId),
    );
    const victim = host === undefined ? undefined : fleet.alive().find((h) => h.instanceId === host);
    if (victim) {
      await victim.freeze();
      await sleep(20);
      const ids = await runningOn(db, schema, queues, victim.instanceId);
      if (ids.length > 0) {
        await victim.kill();
        return { instance: victim.instanceId, at: victim.killedAt!, runningIds: ids };
      }
      victim.thaw();
    }
    await sleep(5);
  }
  return undefined;
}

export async function runOnFleet(
  fleet: LimitedFleet,
  client: AwaClient,
  url: string,
  schema: string,
  spec: RunSpec,
): Promise<RunResult> {
  const queues = [...new Set(spec.jobs.map((j) => j.queue))];
  const before = await ended(client, queues);
  const startsDb = await samplerClient(url, 'limits-starts');
  const runningDb = await samplerClient(url, 'limits-running');
  const cpuAt = async () => ({
    serverMs: await spec.serverCpu!.totalMs(),
    hostsMs: await fleet.hostsCpuMs(),
    wallMs: performance.now(),
  });
  const cpuBefore = spec.serverCpu ? await cpuAt() : undefined;
  const enqueuedAt = Date.now();
  const starts = new StartsCollector(startsDb, schema, queues, enqueuedAt - 1_000, spec.readStartsEveryMs);
  const running = new RunningSampler(runningDb, schema, queues, spec.sampleEveryMs ?? 20);
  const kills: RunResult['kills'] = [];
  const replacements: Promise<unknown>[] = [];
  /** Every job ended (or the run gave up): a kill still looking for a busy host stops looking. */
  let drained = false;
  try {
    const ids: string[] = [];
    for (let i = 0; i < spec.jobs.length; i += CHUNK) {
      const chunk = spec.jobs.slice(i, i + CHUNK).map((j) => ({
        kind: LIMITED_KINDS[j.queue],
        args: j.sleepMs === undefined ? { tenant: j.tenant } : { tenant: j.tenant, sleepMs: j.sleepMs },
      }));
      ids.push(...(await client.enqueueMany(chunk)).map((r) => r.id));
    }
    const killing = (async () => {
      for (const ms of spec.killAfterMs ?? []) {
        await sleep(Math.max(0, enqueuedAt + ms - Date.now()));
        const kill = await killBusiest(fleet, startsDb, schema, queues, () => drained);
        if (!kill) break; // every job ended before a host had attempts to die with
        kills.push(kill);
        // Kept, not awaited: the run goes on while the replacement starts; a failed start fails the run below.
        const replacement = fleet.grow(1);
        replacement.catch(() => {});
        replacements.push(replacement);
      }
    })();
    killing.catch(() => {}); // awaited below; a run that fails first must not leave it unhandled
    const deadline = Date.now() + spec.timeoutMs;
    let done = before;
    let cpu: RunCpu | undefined;
    for (;;) {
      fleet.assertNoCrash();
      for (const p of replacements) await Promise.race([p, Promise.resolve()]);
      done = await ended(client, queues);
      if (done.ended >= before.ended + ids.length) {
        if (cpuBefore) {
          const after = await cpuAt();
          cpu = {
            serverMs: after.serverMs - cpuBefore.serverMs,
            hostsMs: after.hostsMs - cpuBefore.hostsMs,
            wallMs: after.wallMs - cpuBefore.wallMs,
          };
        }
        break;
      }
      if (Date.now() > deadline)
        throw new Error(
          `${done.ended - before.ended} of ${ids.length} jobs ended after ${spec.timeoutMs} ms; ${await stuck(startsDb, schema, queues)}; ${await missing(startsDb, schema, ids, starts, kills, fleet)}`,
        );
      await sleep(50);
    }
    let drainedAt = Date.now();
    drained = true;
    await killing;
    await Promise.all(replacements);
    await running.stop();
    await starts.stop();
    const ends = new Map<string, JobEnd>();
    let fromHistory = 0;
    {
      const { rows } = await startsDb.query<{
        id: string;
        state: string;
        attempt: number;
        errors: { error: string }[] | null;
        finished: number | null;
      }>(
        `select id::text as id, state, attempt, meta->'errors' as errors,
                extract(epoch from finished_at) * 1000 as finished
           from ${schema}.jobs where queue = any($1) and id = any($2::bigint[])`,
        [queues, ids],
      );
      let last = 0;
      for (const r of rows) {
        ends.set(r.id, { state: r.state, attempt: r.attempt, errors: (r.errors ?? []).map((e) => e.error) });
        last = Math.max(last, Number(r.finished ?? 0));
      }
      // A job whose ring slot was pruned is no longer a row of the view: compact history keeps its id, attempt
      // and completion time (not its errors).
      const history = await startsDb.query<{ id: string; attempt: number; finished: number }>(
        `select x.id::text as id, h.attempt::int as attempt, extract(epoch from h.closed_at) * 1000 as finished
           from ${schema}.completed_history h
           cross join lateral unnest(h.ids) run
           cross join lateral generate_series(lower(run), upper(run) - 1) x(id)
          where h.closed_at >= to_timestamp($2 / 1000.0) and x.id = any($1::bigint[])`,
        [ids, enqueuedAt - 1_000],
      );
      for (const r of history.rows) {
        if (ends.has(r.id)) continue;
        fromHistory++;
        ends.set(r.id, { state: 'completed', attempt: r.attempt, errors: [] });
        last = Math.max(last, Number(r.finished));
      }
      if (last > 0) drainedAt = last;
    }
    return {
      ids,
      enqueuedAt,
      drainedAt,
      seconds: (drainedAt - enqueuedAt) / 1000,
      starts,
      running,
      kills,
      notCompleted: ids.length - (done.completed - before.completed),
      ends,
      endsFromHistory: fromHistory,
      ...(cpu && kills.length === 0 && replacements.length === 0 ? { cpu } : {}),
    };
  } finally {
    drained = true;
    await running.stop().catch(() => {});
    await starts.stop().catch(() => {});
    await Promise.all(replacements.map((p) => p.catch(() => {})));
    await endQuietly(startsDb);
    await endQuietly(runningDb);
  }
}

/** What the jobs that did not end are doing, for a run that timed out. */
async function stuck(db: pg.Client, schema: string, queues: readonly string[]): Promise<string> {
  const read = async (what: string, sql: string) => {
    try {
      return `${what}: ${JSON.stringify((await db.query(sql, [queues])).rows)}`;
    } catch (err) {
      return `${what}: ${(err as Error).message}`;
    }
  };
  return [
    await read(
      'not completed',
      `select queue, state, count(*)::int as n from ${schema}.jobs
        where queue = any($1) and state <> 'completed' group by 1, 2`,
    ),
    await read(
      'at the gate',
      `select queue, count(*)::int as n, count(distinct gate_key)::int as keys from ${schema}.deferred_jobs
        where queue = any($1) and gate_key is not null group by 1`,
    ),
    await read(
      'holds',
      `select queue, count(*)::int as n from ${schema}.limit_holds where queue = any($1) group by 1`,
    ),
  ].join('; ');
}

/** Jobs of the run the database no longer knows in any state (neither a row of the jobs view nor in compact
 * history), with what the run saw of them: their recorded starts, whether they died with a killed host, whether
 * the leader rescued them. */
async function missing(
  db: pg.Client,
  schema: string,
  ids: readonly string[],
  starts: StartsCollector,
  kills: RunResult['kills'],
  fleet: LimitedFleet,
): Promise<string> {
  try {
    const { rows } = await db.query<{ id: string }>(
      `select x.id::text as id from unnest($1::bigint[]) x(id)
        where not exists (select 1 from ${schema}.jobs j where j.id = x.id)
          and not exists (select 1 from ${schema}.completed_history h where h.ids @> x.id)`,
      [ids],
    );
    const gone = rows.map((r) => r.id);
    const died = new Set(kills.flatMap((k) => k.runningIds));
    const rescued = fleet.rescued();
    const seen = new Map<string, string[]>();
    for (const s of starts.starts)
      if (gone.includes(s.jobId))
        seen.set(s.jobId, [...(seen.get(s.jobId) ?? []), `${s.instance}@${new Date(s.at).toISOString()}`]);
    const gated = new Map<string, string[]>();
    for (const g of starts.gated)
      if (gone.includes(g.jobId))
        gated.set(g.jobId, [...(gated.get(g.jobId) ?? []), `${g.instance}@${new Date(g.at).toISOString()}`]);
    return `gone: ${gone.length} (${gone.slice(0, 3).join(', ')} … ${gone.slice(-3).join(', ')}); started in the db: ${
      gone.filter((id) => seen.has(id)).length
    }; sent to the gate by a claim: ${gone.filter((id) => gated.has(id)).length} (${JSON.stringify(
      gone.slice(0, 3).map((id) => [id, gated.get(id) ?? []]),
    )}); died with a killed host: ${gone.filter((id) => died.has(id)).length}; rescued: ${
      gone.filter((id) => rescued.has(id)).length
    }; ring prunes during the run: ${JSON.stringify(
      fleet
        .lines()
        .flatMap((l) =>
          l.event === 'prune' ? [[l.slot, l.outcome, l.carried, new Date(l.t).toISOString()]] : [],
        ),
    )}; kills: ${JSON.stringify(kills.map((k) => ({ instance: k.instance, at: new Date(k.at).toISOString(), running: k.runningIds.length })))}; first gone starts: ${JSON.stringify(gone.slice(0, 5).map((id) => [id, seen.get(id) ?? []]))}`;
  } catch (err) {
    return `gone: ${(err as Error).message}`;
  }
}

async function endQuietly(c: pg.Client): Promise<void> {
  await c.end().catch(() => {});
}
