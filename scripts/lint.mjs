#!/usr/bin/env node
// `npm run lint`: the type check and the type-aware lint of the whole tree, over one TypeScript
// program per tsconfig. Both need the same program (every source, test, e2e, bench and script file
// of `tsconfig.lint.json`, the console's own program, and the `*.mjs` scripts checked from their
// JSDoc, scripts/tsconfig.json); built once here and handed to
// typescript-eslint (`parserOptions.programs`), the tree is parsed, bound and checked once instead
// of twice, about a fifth of the checks' CPU (docs/history/testing-measurements.md). `npm run typecheck:tests` is the
// type check alone.
//
// Type errors are printed first, as tsc prints them, then the lint report; the exit code is 1 when
// either found anything (lint warnings count: `--max-warnings 0`).
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { ESLint } from 'eslint';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const TSCONFIGS = ['tsconfig.lint.json', 'services/gateway/console/tsconfig.json', 'scripts/tsconfig.json'];

/**
 * The program of a tsconfig, as `tsc -p <tsconfig> --noEmit` builds it; throws on a broken config.
 * @param {string} tsconfig
 */
function programOf(tsconfig) {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(root, tsconfig),
    { noEmit: true },
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
      },
    },
  );
  if (!parsed) throw new Error(`cannot read ${tsconfig}`);
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options, projectReferences: parsed.projectReferences });
  return { program, configErrors: parsed.errors };
}

/** @type {ts.FormatDiagnosticsHost} */
const formatHost = { getCanonicalFileName: (f) => f, getCurrentDirectory: () => root, getNewLine: () => '\n' };

let failed = false;
const programs = [];
for (const tsconfig of TSCONFIGS) {
  const { program, configErrors } = programOf(tsconfig);
  programs.push(program);
  const diagnostics = [...configErrors, ...ts.getPreEmitDiagnostics(program)];
  if (diagnostics.length) {
    failed = true;
    process.stdout.write(`${tsconfig}: ${diagnostics.length} type error(s)\n`);
    const format = process.stdout.isTTY ? ts.formatDiagnosticsWithColorAndContext : ts.formatDiagnostics;
    process.stdout.write(format(diagnostics, formatHost));
  }
}

const eslint = new ESLint({ cwd: root, overrideConfig: { languageOptions: { parserOptions: { programs } } } });
const results = await eslint.lintFiles(['.']);
const problems = results.reduce((n, r) => n + r.errorCount + r.warningCount, 0);
if (problems) {
  failed = true;
  const formatter = await eslint.loadFormatter('stylish');
  process.stdout.write(await formatter.format(results));
}
process.exit(failed ? 1 : 0);
