// Lint rules: typescript-eslint's recommended set, plus what each folder may import. src/ is layered by role
// (DESIGN.md: cli/http → runtime roles → storage → model); each folder may import only the folders below it:
//   src/model        nothing of src/ (domain types and rules)
//   src/storage      model (all queue SQL; pools and connections). Every other folder imports it through
//                    src/storage/index.ts only (the contract); storage/operations.ts is for tests and bench/
//   src/embedded     model (the embedded PostgreSQL launcher)
//   src/terminal     nothing (terminal helpers shared by the CLI and bench/)
//   src/threads      model (the worker-thread pool: both its coordinator side and the thread's entry)
//   src/telemetry    storage, model (metrics and spans of every role)
//   src/producer     telemetry, storage, model (enqueue, enqueueMany, COPY)
//   src/maintenance  telemetry, storage, model (the elector and its maintenance services)
//   src/operator     producer, telemetry, storage, model (AwaClient: operator reads and actions, migrate)
//   src/host         maintenance, threads, telemetry, storage, model (the worker host)
//   src/roles.ts     the roles' public surface; src/index.ts re-exports it
//   src/http         src/roles.ts only, model, and types from storage; imported only by src/cli and src/index.ts
//   src/testing      operator, host, storage (index.ts, and storage/testing.ts: the test-only reads and clock),
//                    model; the package's `awa-node/testing` entry point, imported by nothing in src/
//   src/cli          anything in src/; bench/ only through bench/index.ts, from commands/bench.ts
//   bench            the public API (src/index.ts), src/terminal, its own files; never test/
//   scripts          the public API, src/embedded and test/ helpers (developer tools, not shipped)
//   examples         the public API (src/index.ts) only, as a user's code would
// No file under src/ or bench/ imports test/. Within one file's config object the rule's
// options replace (not merge with) those of an earlier object, so every object lists all its groups.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const rule = (groups) => ({
  'no-restricted-imports': ['error', { patterns: groups.map(([group, message]) => ({ group, message })) }],
});

const noTest = [['**/test/**'], 'only tests import test/'];
const noBench = [['**/bench/**'], 'src/ reaches bench/ only through src/cli/commands/bench.ts'];
// The top-level files of src/ as a file one folder down names them.
const TOP = ['../index.js', '../roles.js'];
const SRC_DIRS = [
  'model',
  'storage',
  'embedded',
  'terminal',
  'threads',
  'telemetry',
  'producer',
  'maintenance',
  'operator',
  'host',
  'http',
  'cli',
  'testing',
];
/** src/<dir> may import only the folders it lists (and itself). */
const layer = (dir, allowed) => ({
  files: [`src/${dir}/**/*.ts`],
  rules: rule([
    ...SRC_DIRS.filter((d) => d !== dir && !allowed.includes(d)).map((d) => [
      [`**/${d}/*`],
      `src/${dir} must not import src/${d}: it may import ${allowed.join(', ') || 'nothing of src/'} (see eslint.config.js)`,
    ]),
    [TOP, `src/${dir} must not import src/index.ts or src/roles.ts (they sit above every role)`],
    ...(dir !== 'storage' && allowed.includes('storage')
      ? [
          [
            ['**/storage/*', '!**/storage/index.js'],
            `src/${dir} uses storage through src/storage/index.ts only: the contract's operations, pools, types`,
          ],
        ]
      : []),
    noBench,
    noTest,
  ]),
});

// Imports of src/ other than the given folders and files. (gitignore semantics: a file cannot be re-included
// once its folder is excluded, so folders are listed one by one rather than excluding src/** wholesale.)
const srcExcept = ({ dirs = [], files = [] }) => [
  '**/src/*.js',
  ...SRC_DIRS.filter((d) => !dirs.includes(d)).map((d) => `**/src/${d}/*`),
  ...files.map((f) => `!**/src/${f}`),
];

// bench/ drives Awa as a user would; its own helpers (args, database, processes) replace the CLI's and the
// test suite's.
const benchGroups = (internals) => [
  [
    srcExcept({ dirs: ['terminal'], files: ['index.js', ...internals] }),
    'bench/ uses the public API (src/index.ts) and src/terminal only',
  ],
  noTest,
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', 'bench-results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
    },
  },
  { files: ['src/**/*.ts'], rules: rule([noBench, noTest]) },
  layer('model', []),
  layer('storage', ['model']),
  layer('embedded', ['model']),
  layer('threads', ['model']),
  layer('telemetry', ['storage', 'model']),
  layer('producer', ['telemetry', 'storage', 'model']),
  layer('maintenance', ['telemetry', 'storage', 'model']),
  layer('operator', ['producer', 'telemetry', 'storage', 'model']),
  layer('host', ['maintenance', 'threads', 'telemetry', 'storage', 'model']),
  {
    files: ['src/http/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: [
                '**/cli/*',
                '**/embedded/*',
                '**/terminal/*',
                '**/testing/*',
                '../../index.js',
                '../index.js',
              ],
              message:
                'src/http must not import src/cli, src/embedded, src/terminal, src/testing or src/index.ts (see eslint.config.js)',
            },
            {
              group: ['telemetry', 'producer', 'maintenance', 'operator', 'host', 'threads'].map(
                (d) => `**/${d}/*`,
              ),
              message: 'src/http uses the roles through src/roles.ts only',
            },
            {
              group: ['**/storage/*'],
              allowTypeImports: true,
              message: 'src/http takes only types from src/storage',
            },
            ...[noBench, noTest].map(([group, message]) => ({ group, message })),
          ],
        },
      ],
    },
  },
  // The test helpers sit beside the roles' public surface: they drive a client and a worker host as a user's test
  // would, and reach storage through its contract plus the one module of test-only SQL (storage/testing.ts).
  {
    files: ['src/testing/**/*.ts'],
    rules: rule([
      [
        ['cli', 'http', 'embedded', 'terminal', 'threads', 'maintenance', 'producer', 'telemetry'].map(
          (d) => `**/${d}/*`,
        ),
        'src/testing may import operator, host, storage and model only (see eslint.config.js)',
      ],
      [TOP, 'src/testing must not import src/index.ts or src/roles.ts: it is an entry point of its own'],
      [
        ['**/storage/*', '!**/storage/index.js', '!**/storage/testing.js'],
        'src/testing uses storage through src/storage/index.ts, and its test-only SQL through src/storage/testing.ts',
      ],
      noBench,
      noTest,
    ]),
  },
  {
    files: ['src/terminal/**/*.ts'],
    rules: rule([[['../**'], 'src/terminal imports nothing from src/'], noTest]),
  },
  // The single src → bench edge: `awa bench` runs the harness through bench/index.ts.
  {
    files: ['src/cli/commands/bench.ts'],
    rules: rule([
      [['**/bench/**', '!**/bench/index.js'], 'the CLI reaches bench/ through bench/index.ts only'],
      noTest,
    ]),
  },

  { files: ['bench/**/*.ts'], rules: rule(benchGroups([])) },
  {
    files: ['scripts/**/*.ts'],
    rules: rule([
      [
        srcExcept({ dirs: ['embedded'], files: ['index.js'] }),
        'scripts/ use the public API (src/index.ts), src/embedded and test/ helpers only',
      ],
      [['**/bench/**'], 'scripts/ do not import bench/'],
    ]),
  },
  {
    files: ['examples/**/*.ts'],
    rules: rule([
      [srcExcept({ files: ['index.js'] }), 'examples/ use the public API (src/index.ts) only'],
      [['**/bench/**'], 'examples/ use the public API (src/index.ts) only'],
      noTest,
    ]),
  },
  // The dashboard's page script runs in the browser, not in Node: it sees the DOM and fetch, and imports nothing.
  {
    files: ['src/http/dashboard/assets/**/*.js'],
    languageOptions: {
      sourceType: 'module',
      globals: Object.fromEntries(
        ['document', 'window', 'fetch', 'Node', 'URLSearchParams', 'FormData', 'setTimeout'].map((g) => [
          g,
          'readonly',
        ]),
      ),
    },
    rules: { 'no-restricted-imports': ['error', { patterns: ['*'] }] },
  },
  // micro.ts measures hot internal functions that the public API does not expose (args encoding, job-row
  // building, the settle batcher, the stats histogram), so it alone may import those modules. When
  // the engine changes them, this file changes with them.
  {
    files: ['bench/scenarios/micro.ts'],
    rules: rule(
      benchGroups([
        'model/enqueue-options.js',
        'model/payload.js',
        'host/settle-batcher.js',
        'host/stats.js',
      ]),
    ),
  },
  // claim-cost.ts times the claim itself on one connection, which no public call does alone: it claims and
  // settles through storage/operations.ts (the surface kept for tests and micro-benchmarks).
  {
    files: ['bench/limits/claim-cost.ts'],
    rules: rule(benchGroups(['storage/operations.js'])),
  },
);
