/** Plain-text tables for people (the default output); `--json` prints the answer as it came instead. */
export function table(headers: string[], rows: (string | number | null | undefined)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c === null || c === undefined ? '' : String(c))));
  const widths = headers.map((h, i) => Math.max(h.length, ...cells.map((r) => (r[i] ?? '').length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...cells.map(line)].join('\n');
}

/** `key: value` lines for one record. */
export function fields(pairs: [string, string | number | null | undefined][]): string {
  const w = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${`${k}:`.padEnd(w + 1)} ${v === null || v === undefined ? '-' : String(v)}`).join('\n');
}

export const cents = (n: number) => `$${(n / 100).toFixed(2)}`;
