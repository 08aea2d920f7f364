// The budget bench's parts return nested objects (what was measured, per-case stats, ratios, spreads
// of runs); the result file keeps them whole under `details` and lists every statistic in them as a
// figure of the one result format (bench/README.md, "Results as data"), so tables can name them.
import type { Figure } from '../results.js';

type Json = Record<string, unknown>;
const isObject = (o: unknown): o is Json => typeof o === 'object' && o !== null && !Array.isArray(o);

/** Every object with a `p50` (case stats, ratios) or a `median` (a spread of runs) under `out`, as a figure `<part>.<path>`. */
export function figuresOf(part: string, out: unknown): Figure[] {
  const figures: Figure[] = [];
  const walk = (o: unknown, path: string[], what: string | undefined) => {
    if (!isObject(o)) return;
    const here = typeof o.what === 'string' ? o.what : what;
    if (typeof o.p50 === 'number' || typeof o.median === 'number') {
      const unit = path.includes('ratios') || path.at(-1)?.endsWith('ratio') ? 'ratio' : 'ms';
      figures.push({ ...o, id: [part, ...path].join('.'), label: `${path.join(' ')}${here ? ` (${here})` : ''}`, unit });
      return;
    }
    // A part's `stats` map names the cases; `measured` and `runs` are bookkeeping and raw runs, kept in details only.
    for (const [k, v] of Object.entries(o)) if (k !== 'measured' && k !== 'runs') walk(v, k === 'stats' ? path : [...path, k], here);
  };
  walk(out, [], undefined);
  return figures;
}
