/**
 * One metric's value from a Prometheus text page (a service's /metrics), summed over the series
 * whose labels include `labels`; null when no series matches (the metric was never touched).
 */
export function metricSample(page: string, name: string, labels: Record<string, string> = {}): number | null {
  let total: number | null = null;
  for (const line of page.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const set = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => set.includes(`${k}="${v}"`))) total = (total ?? 0) + Number(m[3]);
  }
  return total;
}

/** A service's /metrics page, read as Prometheus scrapes it. */
export async function scrapeMetrics(healthUrl: string): Promise<string> {
  const res = await fetch(`${healthUrl}/metrics`);
  if (!res.ok) throw new Error(`GET ${healthUrl}/metrics: ${res.status}`);
  return res.text();
}
