// Lint is part of the build (`npm test` runs `npm run lint` first): type-aware typescript-eslint,
// with the rules that catch what review kept finding by hand — promises nobody awaits or handles,
// promises passed where a callback's result is ignored, and a `switch` over a union that misses a case.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      '**/.kandev/**',
      'cpu-profiles/**',
      '**/*.d.ts',
      '**/*.js',
      '**/*.mjs',
      // The scripts are linted (and type-checked from their JSDoc: scripts/tsconfig.json).
      '!scripts/**/*.mjs',
      '**/*.cjs',
      'services/gateway/console/vite.config.ts',
    ],
  },
  {
    files: ['**/*.ts', '**/*.tsx', 'scripts/**/*.mjs'],
    extends: [tseslint.configs.base],
    languageOptions: {
      // One program for the services, packages and tests, one for the console (DOM, JSX): type
      // information for the whole tree in two builds, not one per package. `npm run lint`
      // (scripts/lint.mjs) builds these two itself, type-checks them and hands them over
      // (`parserOptions.programs`, which takes precedence); editors and a bare `npx eslint` use these.
      parserOptions: {
        project: ['./tsconfig.lint.json', './services/gateway/console/tsconfig.json', './scripts/tsconfig.json'],
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false, attributes: false } }],
      '@typescript-eslint/switch-exhaustiveness-check': ['error', { considerDefaultExhaustiveForUnions: true }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      'no-empty': ['error', { allowEmptyCatch: false }],
    },
  },
);
