// Lint rules: typescript-eslint's recommended set, plus the layering rule of DESIGN.md
// (cli → runtime → storage → model): a lower layer never imports a higher one.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const layer = (dir, forbidden) => ({
  files: [`src/${dir}/**/*.ts`],
  rules: {
    'no-restricted-imports': [
      'error',
      {
        patterns: forbidden.map((f) => ({
          group: [`**/${f}/*`],
          message: `src/${dir} must not import src/${f} (layering: cli → runtime → storage → model)`,
        })),
      },
    ],
  },
});

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
  layer('model', ['storage', 'runtime', 'cli']),
  layer('storage', ['runtime', 'cli']),
  layer('runtime', ['cli']),
);
