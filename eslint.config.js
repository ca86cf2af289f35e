// Lint rules: typescript-eslint's recommended set, plus what each folder may import (DESIGN.md's layering
// cli → http → runtime → storage → model, and the edges of the folders around it):
//   src/model      nothing above it
//   src/storage    model
//   src/runtime    storage, model
//   src/http       runtime through src/runtime/index.ts only, model, and types from storage; imported only
//                  by src/cli and src/index.ts
//   src/embedded   model only (errors); never runtime, storage or cli
//   src/terminal   nothing (terminal helpers shared by the CLI and bench/)
//   src/cli        anything in src/; bench/ only through bench/index.ts, from commands/bench.ts
//   src/threads    model and its own folder (the thread pool's entry point and protocol)
//   bench          the public API (src/index.ts), src/terminal, its own files; never test/
//   examples       the public API (src/index.ts) only, as a user's code would
// No file under src/ or bench/ imports test/. Within one file's config object the rule's
// options replace (not merge with) those of an earlier object, so every object lists all its groups.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const rule = (groups) => ({
  'no-restricted-imports': ['error', { patterns: groups.map(([group, message]) => ({ group, message })) }],
});

const noTest = [['**/test/**'], 'only tests import test/'];
const noBench = [['**/bench/**'], 'src/ reaches bench/ only through src/cli/commands/bench.ts'];
const below = (dir, forbidden) => ({
  files: [`src/${dir}/**/*.ts`],
  rules: rule([
    ...forbidden.map((f) => [
      [`**/${f}/*`],
      `src/${dir} must not import src/${f} (folder edges: see eslint.config.js)`,
    ]),
    noBench,
    noTest,
  ]),
});

// Imports of src/ other than the given folders and files. (gitignore semantics: a file cannot be re-included
// once its folder is excluded, so folders are listed one by one rather than excluding src/** wholesale.)
const SRC_DIRS = ['model', 'storage', 'runtime', 'http', 'cli', 'embedded', 'terminal', 'threads'];
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
  below('model', ['storage', 'runtime', 'http', 'cli', 'embedded', 'terminal', 'threads']),
  below('storage', ['runtime', 'http', 'cli', 'embedded', 'terminal', 'threads']),
  below('runtime', ['http', 'cli', 'embedded', 'terminal']),
  below('embedded', ['storage', 'runtime', 'http', 'cli', 'terminal', 'threads']),
  below('threads', ['storage', 'runtime', 'http', 'cli', 'embedded', 'terminal']),
  {
    files: ['src/http/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              group: ['**/cli/*', '**/embedded/*', '**/terminal/*'],
              message:
                'src/http must not import src/cli, src/embedded or src/terminal (see eslint.config.js)',
            },
            {
              group: ['**/runtime/*', '!**/runtime/index.js'],
              message: 'src/http uses the runtime through src/runtime/index.ts only',
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
  // building, the completion batcher, the stats histogram), so it alone may import those modules. When
  // the engine changes them, this file changes with them.
  {
    files: ['bench/scenarios/micro.ts'],
    rules: rule(
      benchGroups([
        'model/enqueue-options.js',
        'model/payload.js',
        'runtime/completion-batcher.js',
        'runtime/stats.js',
      ]),
    ),
  },
);
