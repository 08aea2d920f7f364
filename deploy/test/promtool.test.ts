import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { registry } from '@kandev/runtime';
import { DEPLOY, render } from './render.js';

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

const rule = render('overlays/prod').find((o) => o.kind === 'PrometheusRule');
const rulesFile = join(dir, 'rules.yaml');
if (rule) writeFileSync(rulesFile, stringify({ groups: rule.spec.groups }));
const alertNames = (): string[] => (rule!.spec.groups as { rules: { alert: string }[] }[]).flatMap((g) => g.rules.map((r) => r.alert));

describe('promtool', () => {
  it('accepts the alert rules of the prod overlay', () => {
    expect(rule, 'the prod overlay has a PrometheusRule').toBeDefined();
    const check = promtool(['check', 'rules', rulesFile]);
    expect(check.status, `${check.stdout}${check.stderr}`).toBe(0);
    const alerts = (rule!.spec.groups as { rules: unknown[] }[]).flatMap((g) => g.rules).length;
    expect(check.stdout).toContain(`SUCCESS: ${alerts} rules found`);
  });

  it('passes the unit tests of the alerts (deploy/alerts.test.yaml), which test every alert', () => {
    // promtool resolves rule_files beside the tests file: both go to the same directory.
    const tests = join(dir, 'alerts.test.yaml');
    copyFileSync(join(DEPLOY, 'alerts.test.yaml'), tests);
    const run = promtool(['test', 'rules', tests]);
    expect(run.status, `${run.stdout}${run.stderr}`).toBe(0);
    expect(run.stdout).toContain('SUCCESS');
    const tested = new Set(
      (parse(readFileSync(tests, 'utf8')) as { tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[] }).tests.flatMap((t) =>
        t.alert_rule_test.filter((a) => a.exp_alerts.length > 0).map((a) => a.alertname),
      ),
    );
    expect(
      alertNames().filter((a) => !tested.has(a)),
      'alerts with no test that fires them',
    ).toEqual([]);
  });

  it('points every alert at a runbook section that docs/operations.md has', () => {
    // GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes.
    const anchors = new Set(
      readFileSync(join(DEPLOY, '../docs/operations.md'), 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('## '))
        .map((l) =>
          l
            .slice(3)
            .trim()
            .toLowerCase()
            .replace(/[^a-z0-9 _-]/g, '')
            .replace(/ /g, '-'),
        ),
    );
    const missing = (rule!.spec.groups as { rules: { alert: string; annotations?: { runbook_url?: string } }[] }[])
      .flatMap((g) => g.rules)
      .filter((r) => !anchors.has(r.annotations?.runbook_url?.split('#')[1] ?? ''))
      .map((r) => `${r.alert}: ${r.annotations?.runbook_url ?? 'no runbook_url'}`);
    expect(missing).toEqual([]);
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
