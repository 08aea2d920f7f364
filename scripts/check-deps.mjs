#!/usr/bin/env node
// Every workspace declares exactly what it imports (run by `npm test` before the tests).
//
// - A package imported from src/ is in `dependencies` (a devDependency is missing from a production
//   install, which prunes them).
// - Every entry of `dependencies` is imported from src/ (else it is dead weight in the image, or
//   belongs to the tests: `devDependencies`).
// - A package imported only by the tests (test/, faults/, vitest configs) is in `dependencies` or
//   `devDependencies`, or is one of the root's shared tools (the root devDependencies: vitest,
//   typescript, @types/node).
// - Every entry of `devDependencies` is imported somewhere in the workspace.
// `@types/x` counts as imported wherever `x` is. A src/ import needed only for its types, or only
// looked up (import.meta.resolve), may be a devDependency. The few packages declared for what they install
// rather than what is imported are listed in NOT_IMPORTED, each with its reason.
//
// Workspaces without src/ (e2e) are test code only: their imports are checked against
// dependencies and devDependencies together. So is agents-e2e, which is not a workspace (STANDALONE).
import { builtinModules } from 'node:module';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(fileURLToPath(new URL('.', import.meta.url)), '..');

/**
 * Declared for something other than an import: workspace → { package: reason }.
 * @type {Record<string, Record<string, string>>}
 */
const NOT_IMPORTED = {
  'agents-e2e': {
    '@openai/codex': 'the Codex CLI binary the tests launch',
    '@zed-industries/claude-code-acp': 'the Claude Code ACP binary the tests launch',
    '@google/gemini-cli': 'the Gemini CLI binary the tests launch',
  },
};

/**
 * Imported but deliberately not declared: workspace → { package: reason }.
 * @type {Record<string, Record<string, string>>}
 */
const NOT_DECLARED = {
  'packages/runtime': {
    '@kandev/testkit':
      'by the tests only; testkit depends on runtime, and turbo refuses a cycle even through devDependencies (the workspace link is there either way)',
  },
  'packages/contracts': {
    '@kandev/testkit':
      'by the tests only; testkit depends on contracts, and turbo refuses a cycle even through devDependencies (the workspace link is there either way)',
  },
};

const builtins = new Set(builtinModules);
const SOURCE = /\.(?:[cm]?[jt]sx?)$/;

/**
 * @param {string} dir
 * @returns {string[]}
 */
function files(dir) {
  if (!existsSync(dir)) return [];
  /** @type {string[]} */
  const out = [];
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...files(path));
    else if (SOURCE.test(name)) out.push(path);
  }
  return out;
}

/**
 * Package names a file imports (static, dynamic, re-exports, require, import.meta.resolve).
 * @param {string} file
 * @returns {Set<string>}
 */
function importsOf(file, excludeTypes = false) {
  let text = readFileSync(file, 'utf8');
  // excludeTypes: what must be there at run time, i.e. neither a type-only import nor a mere lookup
  // (import.meta.resolve / require.resolve: the code handles the package's absence).
  if (excludeTypes)
    text = text.replace(/\b(?:import|export)\s+type\s[^'"`;]*?\bfrom\s*['"][^'"]+['"]/g, '').replace(/\b(?:import\.meta\.resolve|require\.resolve)\s*\(/g, '');
  text = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  /** @type {Set<string>} */
  const found = new Set();
  const patterns = [
    /\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"`]([^'"`$]+)/g,
    /\brequire(?:\.resolve)?\s*\(\s*['"]([^'"]+)['"]/g,
    /\bimport\.meta\.resolve\s*\(\s*['"`]([^'"`$]+)/g,
  ];
  for (const re of patterns)
    for (const m of text.matchAll(re)) {
      const name = packageName(m[1] ?? '');
      if (name) found.add(name);
    }
  return found;
}

/**
 * @param {string} spec
 * @returns {string | null}
 */
function packageName(spec) {
  if (spec.startsWith('.') || spec.startsWith('/') || spec.startsWith('node:') || spec.startsWith('#')) return null;
  const parts = spec.split('/');
  const name = spec.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] ?? '');
  return builtins.has(name) || !/^(@[a-z0-9-~][a-z0-9-._~]*\/)?[a-z0-9-~][a-z0-9-._~]*$/.test(name) ? null : name;
}

/**
 * @param {string} dir
 * @param {string[]} paths
 */
function filesUnder(dir, paths) {
  return paths.flatMap((p) => (statSafe(join(dir, p))?.isDirectory() ? files(join(dir, p)) : existsSync(join(dir, p)) ? [join(dir, p)] : []));
}
/**
 * @param {string} dir
 * @param {string[]} paths
 */
function importsUnder(dir, paths) {
  /** @type {Set<string>} */
  const all = new Set();
  for (const f of filesUnder(dir, paths)) for (const n of importsOf(f)) all.add(n);
  return all;
}
/**
 * Of what the files import, the packages no file needs at run time (only their types, or a lookup).
 * @param {string} dir
 * @param {string[]} paths
 */
function typeOnlyUnder(dir, paths) {
  /** @type {Set<string>} */
  const typeOnly = new Set();
  /** @type {Set<string>} */
  const runtime = new Set();
  for (const f of filesUnder(dir, paths)) {
    const needed = importsOf(f, true);
    for (const n of importsOf(f)) (needed.has(n) ? runtime : typeOnly).add(n);
  }
  for (const n of runtime) typeOnly.delete(n);
  return typeOnly;
}
const statSafe = (/** @type {string} */ p) => (existsSync(p) ? statSync(p) : undefined);

/** @type {{ workspaces: string[], devDependencies?: Record<string, string> }} */
const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const sharedTools = new Set(Object.keys(rootPkg.devDependencies ?? {}));
const workspaces = rootPkg.workspaces
  .flatMap((w) => (w.endsWith('/*') ? readdirSync(join(root, w.slice(0, -2))).map((d) => join(w.slice(0, -2), d)) : [w]))
  .filter((w) => existsSync(join(root, w, 'package.json')));
// Outside the workspaces, with a lockfile of their own (agents-e2e: the published agents, installed
// apart). They reach the workspaces' packages through the root's node_modules, where npm links them,
// so those are not declared there (npm would look them up in the registry); everything else is.
const STANDALONE = ['agents-e2e'];
const workspaceNames = new Set(workspaces.map((w) => JSON.parse(readFileSync(join(root, w, 'package.json'), 'utf8')).name));

/** @type {string[]} */
const problems = [];
for (const ws of [...workspaces, ...STANDALONE]) {
  const dir = join(root, ws);
  /** @type {{ name: string, dependencies?: Record<string, string>, devDependencies?: Record<string, string> }} */
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const deps = new Set(Object.keys(pkg.dependencies ?? {}));
  const devDeps = new Set(Object.keys(pkg.devDependencies ?? {}));
  const allowed = NOT_IMPORTED[ws] ?? {};
  const undeclared = NOT_DECLARED[ws] ?? {};
  const hasSrc = existsSync(join(dir, 'src'));
  // console/: the gateway's operator console, bundled at build time (ADR 0028), so its imports are
  // devDependencies like the tests' (the image keeps only the built files).
  const testPaths = ['test', 'faults', 'console', ...readdirSync(dir).filter((n) => /^vitest.*\.config\.[cm]?[jt]s$/.test(n))];
  const srcImports = hasSrc ? importsUnder(dir, ['src']) : new Set(/** @type {string[]} */ ([]));
  const testImports = importsUnder(dir, testPaths);
  const srcTypeOnly = hasSrc ? typeOnlyUnder(dir, ['src']) : new Set(/** @type {string[]} */ ([]));
  for (const set of [srcImports, testImports]) {
    set.delete(pkg.name);
    for (const n of Object.keys(undeclared)) set.delete(n);
    if (STANDALONE.includes(ws)) for (const n of workspaceNames) set.delete(n);
  }
  /** @param {string} name @param {Set<string>} set */
  const used = (name, set) => set.has(name) || (name.startsWith('@types/') && [...set].some((n) => typesFor(n) === name));
  const say = (/** @type {string} */ msg) => problems.push(`${ws}: ${msg}`);

  if (hasSrc) {
    // A type-only import is erased at build, and a lookup copes with the package's absence: a
    // devDependency serves either (scripted agents: packages/agentctl/src/catalogue.ts).
    for (const n of srcImports)
      if (!deps.has(n) && !(srcTypeOnly.has(n) && devDeps.has(n)))
        say(`src/ imports ${n}, which is not in dependencies${devDeps.has(n) ? ' (it is a devDependency)' : ''}`);
    for (const n of deps)
      if (!used(n, srcImports) && !allowed[n])
        say(`dependency ${n} is not imported from src/${used(n, testImports) ? ' (only by the tests: make it a devDependency)' : ''}`);
    for (const n of testImports) if (!deps.has(n) && !devDeps.has(n) && !sharedTools.has(n)) say(`the tests import ${n}, which is declared nowhere`);
    for (const n of devDeps) if (!used(n, testImports) && !used(n, srcImports) && !allowed[n]) say(`devDependency ${n} is not imported`);
  } else {
    for (const n of testImports) if (!deps.has(n) && !devDeps.has(n) && !sharedTools.has(n)) say(`imports ${n}, which is declared nowhere`);
    for (const n of [...deps, ...devDeps]) if (!used(n, testImports) && !allowed[n]) say(`${n} is declared but not imported`);
  }
}

/**
 * @types/x for x, @types/scope__x for @scope/x.
 * @param {string} name
 */
function typesFor(name) {
  return name.startsWith('@') ? `@types/${name.slice(1).replace('/', '__')}` : `@types/${name}`;
}

if (problems.length) {
  console.error(`check-deps: ${problems.length} problem(s); each workspace's package.json must declare exactly what its code imports:`);
  for (const p of problems) console.error(`  ${p}`);
  process.exit(1);
}
console.log(
  `check-deps: ${workspaces.length} workspaces and ${STANDALONE.join(', ')} declare exactly what they import (${relative(process.cwd(), root) || '.'})`,
);
