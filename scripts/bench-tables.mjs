#!/usr/bin/env node
// @ts-check
// The measurement tables in bench/*.md and docs/*.md, generated from the result files under
// bench/results/ (format "kandev-bench/1", bench/README.md "Results as data"). Each table sits
// between `<!-- bench-table {...} -->` and `<!-- /bench-table -->`; everything in between is
// replaced (a marker counts at the start of a line only). `--check` (part of `npm test`'s checks) changes nothing and fails when a table differs
// from what its file gives, when a marker names a missing file or figure, or when a result file does
// not follow the format.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
const RESULTS_DIR = join(ROOT, 'bench/results');
const DOC_DIRS = ['bench', 'docs'];
const FORMAT = 'kandev-bench/1';
const STATS = ['n', 'p50', 'p90', 'p99', 'mean', 'min', 'max', 'stddev'];
const MARKER = /^<!-- bench-table (\{.*?\}) -->\n[\s\S]*?^<!-- \/bench-table -->/gm;

/**
 * @typedef {{ id: string, label: string, unit?: string, baseline?: string, ratio?: Record<string, number>, [k: string]: unknown }} Figure
 * @typedef {{ cpus: number, model: string, node: string, os?: string, load_average: { start: number[], end: number[] } }} Machine
 * @typedef {{ format: string, name: string, title: string, command: string, env: Record<string, string>, commit: string | null, date: string, machine: Machine, figures: Figure[], notes?: string[] }} ResultFile
 * @typedef {{ results: string, ids?: string[], columns: string[], caption?: boolean }} TableSpec
 */

/** @param {unknown} x @returns {x is Record<string, unknown>} */
const isObject = (x) => typeof x === 'object' && x !== null && !Array.isArray(x);

/**
 * What is wrong with a result file (empty when nothing).
 * @param {unknown} r
 * @param {string} stem
 * @returns {string[]}
 */
export function formatProblems(r, stem) {
  if (!isObject(r)) return ['not a JSON object'];
  const out = [];
  if (r.format !== FORMAT) out.push(`format is ${JSON.stringify(r.format)}, not "${FORMAT}"`);
  if (r.name !== stem) out.push(`name ${JSON.stringify(r.name)} is not the file's stem "${stem}"`);
  for (const k of ['title', 'command', 'date']) if (typeof r[k] !== 'string' || r[k] === '') out.push(`${k} must be a non-empty string`);
  if (typeof r.date === 'string' && Number.isNaN(Date.parse(r.date))) out.push(`date ${r.date} is not ISO 8601`);
  if (!(r.commit === null || typeof r.commit === 'string')) out.push('commit must be a string or null');
  if (!isObject(r.env) || Object.values(r.env).some((v) => typeof v !== 'string')) out.push('env must map names to strings');
  const m = r.machine;
  if (!isObject(m)) out.push('machine is missing');
  else {
    if (!Number.isInteger(m.cpus)) out.push('machine.cpus must be a whole number');
    for (const k of ['model', 'node']) if (typeof m[k] !== 'string') out.push(`machine.${k} must be a string`);
    const la = m.load_average;
    const loads = (/** @type {unknown} */ x) => Array.isArray(x) && x.length <= 3 && x.every((v) => typeof v === 'number');
    if (!isObject(la) || !loads(la.start) || !loads(la.end)) out.push('machine.load_average must be {start, end}, up to 3 numbers each');
  }
  if (!Array.isArray(r.figures) || r.figures.length === 0) return [...out, 'figures must be a non-empty list'];
  const ids = new Set();
  for (const f of r.figures) {
    if (!isObject(f) || typeof f.id !== 'string' || typeof f.label !== 'string') {
      out.push(`a figure without an id and label: ${JSON.stringify(f).slice(0, 80)}`);
      continue;
    }
    if (ids.has(f.id)) out.push(`figure ${f.id} appears twice`);
    ids.add(f.id);
    for (const s of STATS) if (s in f && typeof f[s] !== 'number') out.push(`${f.id}.${s} must be a number`);
    for (const [k, v] of Object.entries(f)) if (v === null) out.push(`${f.id}.${k} is null (leave out what was not measured)`);
  }
  for (const f of r.figures) {
    if (isObject(f) && f.baseline !== undefined && !ids.has(f.baseline))
      out.push(`${f.id}'s baseline ${JSON.stringify(f.baseline)} is not a figure of the file`);
  }
  return out;
}

/** @param {number} x */
const num = (x) => {
  if (Number.isInteger(x)) return x.toLocaleString('en-US');
  const a = Math.abs(x);
  return a >= 100 ? Math.round(x).toLocaleString('en-US') : a >= 10 ? x.toFixed(1) : a >= 1 ? x.toFixed(2) : x.toFixed(3);
};

/** @param {unknown} v @returns {string} */
function cell(v) {
  if (v === undefined) return '';
  if (typeof v === 'number') return num(v);
  if (Array.isArray(v)) return v.map(cell).join(' · ');
  if (isObject(v))
    return Object.entries(v)
      .map(([k, x]) => `${k} ${cell(x)}`)
      .join(', ');
  return String(v).replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

/** @param {Figure} f */
function vs(f) {
  if (!f.baseline || !f.ratio) return '';
  const parts = ['p50', 'p99'].filter((k) => typeof f.ratio?.[k] === 'number').map((k) => `${/** @type {number} */ (f.ratio?.[k]).toFixed(2)}×`);
  return `${parts.join(' / ')} of \`${f.baseline}\``;
}

/** @param {string} field @param {Figure[]} figures */
function header(field, figures) {
  if (field === 'id') return 'id';
  if (field === 'label') return 'one sample';
  if (field === 'vs') return 'vs baseline (p50 / p99)';
  const units = new Set(figures.map((f) => f.unit ?? 'ms'));
  return STATS.includes(field) && field !== 'n' && units.size === 1 ? `${field} ${[...units][0]}` : field;
}

/** @param {string} field */
const numeric = (field) => field !== 'id' && field !== 'label' && field !== 'vs';

/**
 * The figures a table shows, in the order of its `ids` (a trailing `*` matches any tail).
 * @param {ResultFile} r @param {string[] | undefined} ids @returns {Figure[]}
 */
function pick(r, ids) {
  if (!ids) return r.figures;
  return ids.flatMap((pattern) => {
    const match = pattern.endsWith('*') ? r.figures.filter((f) => f.id.startsWith(pattern.slice(0, -1))) : r.figures.filter((f) => f.id === pattern);
    if (match.length === 0) throw new Error(`no figure ${pattern} in bench/results/${r.name}.json`);
    return match;
  });
}

/** @param {ResultFile} r */
export function caption(r) {
  const m = r.machine;
  const [from, to] = [m.load_average.start[0], m.load_average.end[0]];
  const load = from === undefined || to === undefined ? 'load average not recorded' : `load average ${from} → ${to}`;
  const node = m.node === 'unknown' ? '' : ` · Node ${m.node}`;
  return `_${r.date.slice(0, 10)} · ${m.cpus}× ${m.model}${node} · ${load}${r.commit ? ` · commit ${r.commit}` : ''} · \`${r.command}\` · bench/results/${r.name}.json_`;
}

/** @param {TableSpec} spec @param {ResultFile} r @returns {string} */
export function renderTable(spec, r) {
  const figures = pick(r, spec.ids);
  const cols = spec.columns.map((c) => {
    const [field, title] = c.split('=');
    return { field: /** @type {string} */ (field), title: title ?? header(/** @type {string} */ (field), figures) };
  });
  const rows = figures.map((f) => `| ${cols.map(({ field }) => (field === 'vs' ? vs(f) : field === 'id' ? `\`${f.id}\`` : cell(f[field]))).join(' | ')} |`);
  const lines = [`| ${cols.map((c) => c.title).join(' | ')} |`, `|${cols.map((c) => (numeric(c.field) ? '--:' : '---')).join('|')}|`, ...rows];
  if (spec.caption !== false) lines.push('', caption(r));
  return lines.join('\n');
}

/** @returns {Map<string, ResultFile>} */
function loadResults(/** @type {string[]} */ problems) {
  const out = new Map();
  for (const file of readdirSync(RESULTS_DIR)
    .filter((f) => f.endsWith('.json'))
    .sort()) {
    const stem = file.slice(0, -'.json'.length);
    let r;
    try {
      r = JSON.parse(readFileSync(join(RESULTS_DIR, file), 'utf8'));
    } catch (e) {
      problems.push(`bench/results/${file}: ${/** @type {Error} */ (e).message}`);
      continue;
    }
    const wrong = formatProblems(r, stem);
    if (wrong.length) problems.push(...wrong.map((w) => `bench/results/${file}: ${w}`));
    else out.set(stem, /** @type {ResultFile} */ (r));
  }
  return out;
}

function markdownFiles() {
  return DOC_DIRS.flatMap((d) =>
    readdirSync(join(ROOT, d))
      .filter((f) => f.endsWith('.md'))
      .map((f) => join(ROOT, d, f)),
  );
}

function main() {
  const check = process.argv.includes('--check');
  /** @type {string[]} */
  const problems = [];
  const results = loadResults(problems);
  const stale = [];
  for (const path of markdownFiles()) {
    const rel = relative(ROOT, path);
    const text = readFileSync(path, 'utf8');
    const next = text.replace(MARKER, (whole, json) => {
      try {
        const spec = /** @type {TableSpec} */ (JSON.parse(json));
        const r = results.get(spec.results);
        if (!r) throw new Error(`no valid bench/results/${spec.results}.json`);
        if (!Array.isArray(spec.columns) || spec.columns.length === 0) throw new Error('columns must be a non-empty list');
        return `<!-- bench-table ${json} -->\n${renderTable(spec, r)}\n<!-- /bench-table -->`;
      } catch (e) {
        problems.push(`${rel}: table ${json}: ${/** @type {Error} */ (e).message}`);
        return whole;
      }
    });
    if (next === text) continue;
    stale.push(rel);
    if (!check) writeFileSync(path, next);
  }
  for (const p of problems) console.error(`bench-tables: ${p}`);
  if (check && stale.length) console.error(`bench-tables: out of date (run \`node scripts/bench-tables.mjs\`): ${stale.join(', ')}`);
  else if (!check && stale.length) console.log(`bench-tables: rewrote ${stale.join(', ')}`);
  process.exit(problems.length || (check && stale.length) ? 1 : 0);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) main();
