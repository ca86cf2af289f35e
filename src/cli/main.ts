#!/usr/bin/env node
import { AwaError } from '../model/errors.js';
import { UsageError, usage, type OptionSpec } from './args.js';
import { benchCommand, benchOptions, benchSummary } from './commands/bench.js';
import { callbackCommand, callbackOptions } from './commands/callback.js';
import { cronCommand, cronOptions, CRON_USAGE } from './commands/cron.js';
import { demoCommand, demoOptions } from './commands/demo.js';
import { migrateCommand, migrateOptions } from './commands/migrate.js';
import { serveCommand, serveOptions } from './commands/serve.js';
import { workCommand, workOptions } from './commands/work.js';
import { OPERATOR_OPTIONS } from './operator/common.js';
import { dlqCommand, dlqOptions } from './operator/dlq.js';
import { jobCommand, jobOptions } from './operator/job.js';
import { queueCommand, queueOptions, queuesCommand } from './operator/queue.js';
import { runtimeCommand, runtimeOptions } from './operator/runtime.js';
import { storageCommand } from './operator/storage.js';

// The `awa` command: one entry per subcommand, each in commands/.

interface Command {
  summary: string;
  options: Record<string, OptionSpec>;
  run(argv: string[]): Promise<void>;
}

const commands: Record<string, Command> = {
  migrate: {
    summary: 'apply (or print with --sql) the schema migrations',
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
    summary: 'queue list | show NAME | pause NAME | resume NAME: queue health, fleet-wide pause',
    options: { ...OPERATOR_OPTIONS, ...queueOptions },
    run: queueCommand,
  },
  job: {
    summary: 'job show ID | list --state S | cancel ID | retry ID',
    options: { ...OPERATOR_OPTIONS, ...jobOptions },
    run: jobCommand,
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

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(help());
    return name ? 0 : 2;
  }
  const command = commands[name];
  if (!command) {
    console.error(`awa: unknown command "${name}"\n\n${help()}`);
    return 2;
  }
  if (rest.includes('--help')) {
    console.log(`awa ${name}: ${command.summary}\n${usage(command.options)}`);
    return 0;
  }
  try {
    await command.run(rest);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`awa ${name}: ${err.message}`);
      return 2;
    }
    if (err instanceof AwaError) {
      console.error(`awa ${name}: ${err.message} [${err.code}]`);
      return 1;
    }
    throw err;
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
