#!/usr/bin/env node
import { AwaError } from '../model/errors.js';
import { UsageError, usage, type OptionSpec } from './args.js';
import { adminCommand, adminOptions } from './commands/admin.js';
import { benchCommand, benchOptions, benchSummary } from './commands/bench.js';
import { callbackCommand, callbackOptions } from './commands/callback.js';
import { demoCommand, demoOptions } from './commands/demo.js';
import { migrateCommand, migrateOptions } from './commands/migrate.js';
import { serveCommand, serveOptions } from './commands/serve.js';
import { workCommand, workOptions } from './commands/work.js';

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
  queues: { summary: 'per-queue counts', options: adminOptions, run: adminCommand('queues') },
  job: { summary: 'job get <id> | job cancel <id>', options: adminOptions, run: adminCommand('job') },
  callback: {
    summary: 'callback complete|fail|retry|cancel|resume TOKEN: deliver an external callback',
    options: callbackOptions,
    run: callbackCommand,
  },
  serve: {
    summary: 'serve HTTP: the signed callback receiver at POST /callbacks',
    options: serveOptions,
    run: serveCommand,
  },
  dlq: {
    summary: 'dlq list | dlq retry <id…> | dlq purge (<id…> | --older-than-ms N)',
    options: adminOptions,
    run: adminCommand('dlq'),
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
