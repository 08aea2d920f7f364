// The one writer of measurement files: every bench runner records its figures through it, in the format
// bench/README.md ("Results as data") defines, and `node scripts/bench-tables.mjs` renders the tables from
// them. Start the record before measuring (`beginResult`), so the load average at the start is the one
// the figures ran under; write it once at the end.
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, platform, release, arch } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Stats } from './stats.js';

export const RESULT_FORMAT = 'kandev-bench/1';

/** Where result files live: bench/results/<name>.json. */
export const resultsDir = fileURLToPath(new URL('../results/', import.meta.url));

/** One measured thing: a stable id, what one sample is, and its figures (numbers, or short strings). */
export interface Figure {
  id: string;
  label: string;
  /** Unit of the figures that are not named otherwise; 'ms' unless said. */
  unit?: string;
  /** Another figure's id in the same file: the floor this one is read against. */
  baseline?: string;
  /** This figure over its baseline's, per statistic. */
  ratio?: Partial<Record<'p50' | 'p90' | 'p99' | 'mean', number>>;
  [field: string]: unknown;
}

export interface Machine {
  cpus: number;
  model: string;
  node: string;
  os: string;
  /** 1, 5 and 15-minute load averages when the run started and when it ended. */
  load_average: { start: number[]; end: number[] };
  [extra: string]: unknown;
}

export interface ResultFile {
  format: typeof RESULT_FORMAT;
  /** The file's name without `.json`; tables name it. */
  name: string;
  title: string;
  /** How to reproduce it, as typed at the repository root. */
  command: string;
  /** The BENCH_* and KANDEV_* variables the run had set. */
  env: Record<string, string>;
  commit: string | null;
  /** When the run ended, ISO 8601. */
  date: string;
  machine: Machine;
  figures: Figure[];
  /** Short remarks that belong to this run (a label, what was different); conclusions go in the prose. */
  notes?: string[];
  /** Raw data kept beside the figures (per-run samples, breakdowns); never rendered. */
  details?: unknown;
}

export interface ResultRecorder {
  /** Writes bench/results/<name>.json (or `opts.dir`); returns its path. */
  write(figures: Figure[], extra?: { notes?: string[]; details?: unknown; machine?: Record<string, unknown> }): string;
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** `{...stats, baseline, ratio}` for a figure read against `base`. */
export function against(stats: Stats, baselineId: string, base: Stats): Pick<Figure, 'baseline' | 'ratio'> {
  return { baseline: baselineId, ratio: { p50: stats.p50 / base.p50, p99: stats.p99 / base.p99, mean: stats.mean / base.mean } };
}

/** Rewrites the generated tables (bench/*.md, docs/*.md) from the result files: scripts/bench-tables.mjs. */
export function renderTables(): void {
  execFileSync(process.execPath, [fileURLToPath(new URL('../../scripts/bench-tables.mjs', import.meta.url))], { stdio: 'inherit' });
}

export function gitCommit(cwd = fileURLToPath(new URL('../', import.meta.url))): string | null {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return null;
  }
}

function runEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (/^(BENCH|KANDEV)_/.test(k) && v !== undefined) env[k] = v;
  return Object.fromEntries(Object.entries(env).sort(([a], [b]) => a.localeCompare(b)));
}

/**
 * Starts the record of one run: captures the load average now. `name` is the file's stem
 * (`floor`, `tree-curve.<label>`, `tails.stop`): letters, digits, `.`, `_` and `-`.
 */
export function beginResult(opts: { name: string; title: string; command: string; dir?: string }): ResultRecorder {
  if (!/^[a-z0-9][a-z0-9._-]*$/.test(opts.name)) throw new Error(`result name "${opts.name}" must be lower-case letters, digits, '.', '_' or '-'`);
  const loadAtStart = loadavg().map(round3);
  return {
    write(figures, extra = {}) {
      const ids = new Set<string>();
      for (const f of figures) {
        if (ids.has(f.id)) throw new Error(`result ${opts.name}: figure id "${f.id}" appears twice`);
        ids.add(f.id);
      }
      for (const f of figures) {
        if (f.baseline !== undefined && !ids.has(f.baseline)) throw new Error(`result ${opts.name}: ${f.id}'s baseline "${f.baseline}" is not in the file`);
      }
      const cpu = cpus();
      const file: ResultFile = {
        format: RESULT_FORMAT,
        name: opts.name,
        title: opts.title,
        command: opts.command,
        env: runEnv(),
        commit: gitCommit(),
        date: new Date().toISOString(),
        machine: {
          cpus: cpu.length,
          model: cpu[0]?.model.trim() ?? 'unknown',
          node: process.version,
          os: `${platform()} ${release()} ${arch()}`,
          load_average: { start: loadAtStart, end: loadavg().map(round3) },
          ...extra.machine,
        },
        figures,
        ...(extra.notes?.length ? { notes: extra.notes } : {}),
        ...(extra.details !== undefined ? { details: extra.details } : {}),
      };
      const dir = opts.dir ?? resultsDir;
      mkdirSync(dir, { recursive: true });
      const path = join(dir, `${opts.name}.json`);
      writeFileSync(path, `${JSON.stringify(file, null, 2)}\n`);
      return path;
    },
  };
}
