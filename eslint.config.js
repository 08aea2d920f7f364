// Lint is part of the build (`npm test` runs `npm run lint` first): type-aware typescript-eslint,
// with the rules that catch what review kept finding by hand — promises nobody awaits or handles,
// promises passed where a callback's result is ignored, and a `switch` over a union that misses a case —
// and no deep import into another package: only what its `exports` names (ADR 0076).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import tseslint from 'typescript-eslint';

/**
 * Every workspace package's public entry points, from its package.json `exports`: `@kandev/x`
 * for ".", `@kandev/x/sub` for "./sub", a `*` of a pattern as one path segment or more.
 */
function publicEntryPoints() {
  const root = import.meta.dirname;
  const out = [];
  for (const dir of ['packages', 'services']) {
    for (const name of readdirSync(join(root, dir))) {
      const manifest = join(root, dir, name, 'package.json');
      if (!existsSync(manifest)) continue;
      const pkg = JSON.parse(readFileSync(manifest, 'utf8'));
      for (const key of Object.keys(pkg.exports ?? {})) out.push((pkg.name + key.slice(1)).replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace('*', '[^\'"]+'));
    }
  }
  return out;
}

/** A relative path that climbs out of its package into another's directory. */
const PACKAGE_DIRS = '(?:packages|services)/|(?:contracts|runtime|testkit|cli|agentctl|gateway|holds|lifecycle|mcp|orchestrator)/(?:src|dist|test)/';

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
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: `^(?!(?:${publicEntryPoints().join('|')})$)@kandev/`,
              message: "Not one of the package's entry points: import what its package.json `exports` names, or add an entry point there (ADR 0076).",
            },
            {
              regex: `^(?:\\.\\./)+(?:${PACKAGE_DIRS})`,
              message: "Another package's files: import the package by its name and an entry point its `exports` names (ADR 0076).",
            },
          ],
        },
      ],
    },
  },
  {
    // The host module stays free of the rest of the runtime (NATS, the database, the tracing SDK):
    // agentctl, the scripts and the benchmarks load it alone (ADR 0076).
    files: ['packages/runtime/src/host/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { patterns: [{ regex: '^(?:\\.\\./|@kandev/)', message: 'The host module imports only Node, @opentelemetry/api and itself (ADR 0076).' }] },
      ],
    },
  },
  {
    // The console takes the wire shapes from the contracts as types only: nothing of the package (or
    // what it may import one day) reaches the browser bundle.
    files: ['services/gateway/console/src/**/*.{ts,tsx}'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        { paths: [{ name: '@kandev/contracts', message: 'the console imports the contracts as types only (import type)', allowTypeImports: true }] },
      ],
    },
  },
);
