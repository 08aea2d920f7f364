import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { registry } from '@kandev/runtime';
import { render } from './render.js';

/**
 * Prometheus's own tool over what an operator's Prometheus will load: the alert rules of the prod
 * overlay (`promtool check rules`: the PromQL parses, every rule is well formed) and the metrics the
 * services export (`promtool check metrics`: names, types and help as Prometheus's linter wants
 * them). manifests.test.ts checks that each alert reads a metric that exists; this checks that
 * Prometheus can read both. `.ci/run` installs promtool from Debian's prometheus package.
 */
function promtool(args: string[], input?: string) {
  const run = spawnSync('promtool', args, { encoding: 'utf8', input });
  if (run.error) throw new Error(`promtool must be on PATH (Debian: the prometheus package; .ci/run installs the binary alone): ${run.error.message}`);
  return run;
}

const dir = mkdtempSync(join(tmpdir(), 'kandev-promtool-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('promtool', () => {
  it('accepts the alert rules of the prod overlay', () => {
    const rule = render('overlays/prod').find((o) => o.kind === 'PrometheusRule');
    expect(rule, 'the prod overlay has a PrometheusRule').toBeDefined();
    const file = join(dir, 'rules.yaml');
    writeFileSync(file, stringify({ groups: rule!.spec.groups }));
    const check = promtool(['check', 'rules', file]);
    expect(check.status, `${check.stdout}${check.stderr}`).toBe(0);
    const alerts = (rule!.spec.groups as { rules: unknown[] }[]).flatMap((g) => g.rules).length;
    expect(check.stdout).toContain(`SUCCESS: ${alerts} rules found`);
  });

  it('finds nothing to fix in the metrics the services export', async () => {
    // prom-client's default Node.js metrics (`nodejs_active_handles_total` is a gauge named like a
    // counter) are the library's to name, not ours: only kandev's own metrics are linted.
    const metrics = await registry.getMetricsAsJSON();
    const own = metrics.filter((m) => !m.name.startsWith('nodejs_') && !m.name.startsWith('process_'));
    expect(own.length, 'kandev exports metrics of its own').toBeGreaterThan(10);
    const exposition = (await Promise.all(own.map((m) => registry.getSingleMetricAsString(m.name)))).join('\n') + '\n';
    const check = promtool(['check', 'metrics'], exposition);
    expect(`${check.stdout}${check.stderr}`.trim(), 'promtool check metrics').toBe('');
    expect(check.status).toBe(0);
  });
});
