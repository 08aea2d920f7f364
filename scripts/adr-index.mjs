#!/usr/bin/env node
// The index of the architecture decisions, docs/decisions/README.md, generated from the ADRs
// themselves (as the NATS architecture-and-design repository generates its index).
//
//   node scripts/adr-index.mjs          writes the index
//   node scripts/adr-index.mjs --check  fails (exit 1) when the index is stale or an ADR breaks a rule
//
// The rules (`npm test` runs --check):
// - every ADR is `NNNN-slug.md` whose first line is `# NNNN Title` and which has a `Status:` line;
// - numbers are contiguous, or the gap is recorded in GAPS below with why;
// - a relation names an ADR that exists: `Supersedes`/`Amends NNNN` in one ADR's Status paragraph
//   and `Superseded by`/`Amended by NNNN` in the other's, both ways. An accepted ADR changes only
//   its Status line, so this is how a later decision points back at it.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const DIR = join(dirname(fileURLToPath(import.meta.url)), '..', 'docs', 'decisions');
const INDEX = join(DIR, 'README.md');

/**
 * @typedef {{ kind: string, target: string }} Relation
 * @typedef {{ number: string, file: string, title: string, status: string, date: string, relations: Relation[] }} Adr
 */

/**
 * Numbers never used, and why (a number once published is never reused).
 * @type {Record<string, string>}
 */
const GAPS = {
  '0023': 'no ADR was written under this number; the numbering skipped it',
  '0036': 'no ADR was written under this number; the numbering skipped it',
  '0069': 'reserved for the console work of round 4, which needed no new decision (ADR 0058 had made it)',
  '0074': 'reserved for a second decision on the stop and cancel tails, not written (docs/fast-paths.md "Tails" lists the open leads)',
};

/** @type {Record<string, string>} */
const FORWARD = { Supersedes: 'Superseded by', Amends: 'Amended by' };
const RELATION = /\b(Supersedes|Amends|Superseded by|Amended by)\s+((?:ADR\s+)?\d{4}(?:(?:,\s*|\s+and\s+)(?:ADR\s+)?\d{4})*)/g;

/**
 * One ADR file → {number, file, title, status, date, relations: [{kind, target}]}; throws on a malformed file.
 * @param {string} file
 * @param {string} text
 * @returns {Adr}
 */
export function parseAdr(file, text) {
  const m = /^(\d{4})-[a-z0-9-]+\.md$/.exec(file);
  if (!m) throw new Error(`${file}: not named NNNN-slug.md`);
  const number = m[1] ?? '';
  const lines = text.split('\n');
  const head = /^# (\d{4}) (.+)$/.exec(lines[0] ?? '');
  if (!head || head[1] !== number) throw new Error(`${file}: the first line must be "# ${number} <title>"`);
  const at = lines.findIndex((l) => l.startsWith('Status:'));
  if (at < 0) throw new Error(`${file}: no "Status:" line`);
  const end = lines.findIndex((l, i) => i > at && l.trim() === '');
  const paragraph = lines
    .slice(at, end < 0 ? undefined : end)
    .join(' ')
    .replace(/\s+/g, ' ');
  const status = /^Status: (accepted|proposed|superseded by \d{4}|withdrawn)\b/i.exec(paragraph);
  if (!status) throw new Error(`${file}: the Status line must start "Status: accepted", "proposed", "withdrawn" or "Superseded by NNNN"`);
  const date = /\d{4}-\d{2}-\d{2}/.exec(paragraph)?.[0] ?? '';
  /** @type {Relation[]} */
  const relations = [];
  for (const r of paragraph.matchAll(RELATION)) {
    for (const target of r[2]?.match(/\d{4}/g) ?? []) relations.push({ kind: r[1] ?? '', target });
  }
  return { number, file, title: head[2] ?? '', status: (status[1] ?? '').toLowerCase(), date, relations };
}

/**
 * The rules over all ADRs; returns the problems (empty when every rule holds).
 * @param {Adr[]} adrs
 */
export function checkAdrs(adrs) {
  const problems = [];
  const byNumber = new Map(adrs.map((a) => [a.number, a]));
  const last = Math.max(...adrs.map((a) => Number(a.number)));
  for (let n = 1; n <= last; n++) {
    const id = String(n).padStart(4, '0');
    if (!byNumber.has(id) && !GAPS[id]) problems.push(`${id}: missing, and not recorded as a gap`);
    if (byNumber.has(id) && GAPS[id]) problems.push(`${id}: recorded as a gap but exists`);
  }
  for (const a of adrs) {
    for (const { kind, target } of a.relations) {
      const t = byNumber.get(target);
      if (!t) {
        problems.push(`${a.file}: "${kind} ${target}" names no ADR`);
        continue;
      }
      const back = FORWARD[kind] ?? Object.keys(FORWARD).find((k) => FORWARD[k] === kind);
      if (!t.relations.some((r) => r.kind === back && r.target === a.number)) {
        problems.push(`${a.file}: "${kind} ${target}" but ${t.file}'s Status does not say "${back} ${a.number}"`);
      }
    }
  }
  return problems;
}

/**
 * The index's markdown.
 * @param {Adr[]} adrs
 */
export function renderIndex(adrs) {
  /** @type {Array<{ n: string, a?: Adr, why?: string }>} */
  const rows = [...adrs.map((a) => ({ n: a.number, a })), ...Object.entries(GAPS).map(([n, why]) => ({ n, why }))].sort((x, y) => x.n.localeCompare(y.n));
  const cell = (/** @type {string} */ s) => s.replace(/\|/g, '\\|');
  const lines = [
    '# Architecture decisions',
    '',
    '<!-- Generated by scripts/adr-index.mjs from the ADRs of this folder; `npm test` checks it. Do not edit by hand. -->',
    '',
    'One file per decision. An accepted ADR changes only its Status line: a changed decision is a new ADR',
    "that says `Supersedes NNNN` or `Amends NNNN`, and the older one's Status then says `Superseded by` or",
    '`Amended by` the newer one. Read an ADR together with the ones that amend it.',
    '',
    '| ADR | decision | status | date | relations |',
    '| --- | --- | --- | --- | --- |',
  ];
  for (const { n, a, why } of rows) {
    if (!a) {
      lines.push(`| ${n} | — | not used | | ${cell(why ?? '')} |`);
      continue;
    }
    const rel = a.relations.map((r) => `${r.kind.toLowerCase()} [${r.target}](${adrsFile(adrs, r.target)})`).join(', ');
    lines.push(`| [${n}](${a.file}) | ${cell(a.title)} | ${a.status} | ${a.date} | ${rel} |`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * @param {Adr[]} adrs
 * @param {string} n
 */
const adrsFile = (adrs, n) => adrs.find((a) => a.number === n)?.file ?? '';

export function loadAdrs(dir = DIR) {
  return readdirSync(dir)
    .filter((f) => /^\d{4}-/.test(f))
    .sort()
    .map((f) => parseAdr(f, readFileSync(join(dir, f), 'utf8')));
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const check = process.argv.includes('--check');
  let adrs;
  try {
    adrs = loadAdrs();
  } catch (e) {
    console.error(`[adr-index] ${/** @type {Error} */ (e).message}`);
    process.exit(1);
  }
  const problems = checkAdrs(adrs);
  const index = renderIndex(adrs);
  if (check) {
    let current = '';
    try {
      current = readFileSync(INDEX, 'utf8');
    } catch {
      /* a missing index is reported as stale below */
    }
    if (current !== index) problems.push('docs/decisions/README.md is stale: run `node scripts/adr-index.mjs`');
  } else {
    writeFileSync(INDEX, index);
  }
  for (const p of problems) console.error(`[adr-index] ${p}`);
  process.exit(problems.length ? 1 : 0);
}
