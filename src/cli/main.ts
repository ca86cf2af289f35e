#!/usr/bin/env node
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { AwaError } from '../model/errors.js';
import { UsageError, usage, type OptionSpec } from './args.js';
import { benchCommand, benchOptions, benchSummary } from './commands/bench.js';
import { callbackCommand, callbackOptions } from './commands/callback.js';
import { cronCommand, cronOptions, CRON_USAGE } from './commands/cron.js';
import { demoCommand, demoOptions } from './commands/demo.js';
import { migrateCommand, migrateOptions } from './commands/migrate.js';
import { serveCommand, serveOptions } from './commands/serve.js';
import { workCommand, workOptions } from './commands/work.js';
import { contextOf, type CliContext, type CliIo } from './io.js';
import { auditCommand, auditOptions } from './operator/audit.js';
import { OPERATOR_OPTIONS } from './operator/common.js';
import { dlqCommand, dlqOptions } from './operator/dlq.js';
import { flowCommand, flowOptions } from './operator/flow.js';
import { jobCommand, jobOptions } from './operator/job.js';
import { queueCommand, queueOptions, queuesCommand } from './operator/queue.js';
import { runtimeCommand, runtimeOptions } from './operator/runtime.js';
import { storageCommand } from './operator/storage.js';

// The `awa` command: one entry per subcommand, each in commands/ or operator/. `runCli` runs one command
// line against the environment and output streams it is given and resolves to its exit code, so tests run
// commands in-process; when this module is the process's entry point it runs process.argv.

export type { CliIo, TextSink } from './io.js';

interface Command {
  summary: string;
  options: Record<string, OptionSpec>;
  /** Resolves to the exit code, or to nothing for 0. */
  run(argv: string[], ctx: CliContext): Promise<number | void>;
}

const commands: Record<string, Command> = {
  migrate: {
    summary: 'apply (or print with --sql, or check with --check) the schema migrations',
    options: migrateOptions,
    run: migrateCommand,
  },
  work: {
    summary: 'run a worker host with the handlers of a module',
    options: workOptions,
    run: workCommand,
  },
  demo: {
    summary: 'enqueue and drain N jobs, on an embedded PostgreSQL unless DATABASE_URL is set',
    options: demoOptions,
    run: demoCommand,
  },
  bench: {
    summary: benchSummary,
    options: benchOptions,
    run: benchCommand,
  },
  queues: { summary: 'per-queue counts', options: OPERATOR_OPTIONS, run: queuesCommand },
  queue: {
    summary:
      'queue list | show NAME | pause NAME | resume NAME | shards NAME COUNT | remove NAME | limits [NAME]: queue health, fleet-wide pause, enqueue shards, removing an empty queue, flow-control limits and their overrides',
    options: { ...OPERATOR_OPTIONS, ...queueOptions },
    run: queueCommand,
  },
  job: {
    summary: 'job show ID | list --state S | cancel ID | retry ID',
    options: { ...OPERATOR_OPTIONS, ...jobOptions },
    run: jobCommand,
  },
  flow: {
    summary: 'flow list | show ID | cancel ID: jobs enqueued together with dependencies',
    options: { ...OPERATOR_OPTIONS, ...flowOptions },
    run: flowCommand,
  },
  dlq: {
    summary: 'dlq list | dlq retry <id…> | dlq purge (<id…> | --older-than-ms N)',
    options: { ...OPERATOR_OPTIONS, ...dlqOptions },
    run: dlqCommand,
  },
  runtime: {
    summary:
      'runtime list [--all] | runtime descriptors: worker processes, the leader, declared queues and kinds',
    options: { ...OPERATOR_OPTIONS, ...runtimeOptions },
    run: runtimeCommand,
  },
  storage: {
    summary: 'storage status: ring slots, what holds the oldest, table sizes and dead tuples',
    options: OPERATOR_OPTIONS,
    run: storageCommand,
  },
  audit: {
    summary: 'audit [--limit N] [--action A] [--actor WHO]: who did what, when, from where (newest first)',
    options: { ...OPERATOR_OPTIONS, ...auditOptions },
    run: auditCommand,
  },
  callback: {
    summary: 'callback complete|fail|retry|cancel|resume TOKEN: deliver an external callback',
    options: callbackOptions,
    run: callbackCommand,
  },
  cron: { summary: CRON_USAGE, options: cronOptions, run: cronCommand },
  serve: {
    summary: 'serve HTTP: the signed callback receiver at POST /callbacks and the dashboard at /dashboard',
    options: serveOptions,
    run: serveCommand,
  },
};

function help(): string {
  return [
    'usage: awa <command> [options]',
    '',
    ...Object.entries(commands).flatMap(([name, c]) => [`awa ${name}: ${c.summary}`, usage(c.options), '']),
  ].join('\n');
}

/**
 * Runs `awa <argv…>` and resolves to its exit code: 0 done, 1 an Awa error or an unexpected one, 2 a usage
 * error, 3 a rejected callback, 4 running hosts a migration would leave behind (migrate --check). Output goes to `io.stdout` / `io.stderr`; `io.env` stands for the
 * environment (DATABASE_URL, AWA_CALLBACK_SECRET). Every part of `io` defaults to the process's own.
 */
export async function runCli(argv: readonly string[], io: Partial<CliIo> = {}): Promise<number> {
  const ctx = contextOf({
    env: io.env ?? process.env,
    stdout: io.stdout ?? process.stdout,
    stderr: io.stderr ?? process.stderr,
  });
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    (name ? ctx.out : ctx.err)(help());
    return name ? 0 : 2;
  }
  const command = commands[name];
  if (!command) {
    ctx.err(`awa: unknown command "${name}"\n\n${help()}`);
    return 2;
  }
  if (rest.includes('--help')) {
    ctx.out(`awa ${name}: ${command.summary}\n${usage(command.options)}`);
    return 0;
  }
  try {
    return (await command.run(rest, ctx)) ?? 0;
  } catch (err) {
    if (err instanceof UsageError) {
      ctx.err(`awa ${name}: ${err.message}`);
      return 2;
    }
    if (err instanceof AwaError) {
      ctx.err(`awa ${name}: ${err.message} [${err.code}]`);
      return 1;
    }
    ctx.err(
      `awa ${name}: unexpected error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`,
    );
    return 1;
  }
}

/** Runs process.argv and exits with its code (what bin/awa.js and `tsx src/cli/main.ts` do). */
export function main(): void {
  runCli(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}

/** True when this module is the script node was started with (not when a test imports it). */
function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (!script) return false;
  try {
    return pathToFileURL(realpathSync(script)).href === import.meta.url;
  } catch {
    return false;
  }
}

if (isEntryPoint()) main();
