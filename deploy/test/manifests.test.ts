import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { GatewayEnv } from '@kandev/gateway/env';
import { HoldsEnv } from '@kandev/holds/env';
import { LifecycleEnv } from '@kandev/lifecycle/env';
import { McpEnv } from '@kandev/mcp/env';
import { OrchestratorEnv } from '@kandev/orchestrator/env';
import { CATALOGUE_ENV } from '@kandev/agentctl';
import { KEY_ENV, registry, SERVICE_KEYS, SHARED_KEY_ENV } from '@kandev/runtime';
import * as externalSecrets from '@kubernetes-models/external-secrets/external-secrets.io/v1';
import * as monitoring from '@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1';
import * as core from 'kubernetes-models/v1';
import * as apps from 'kubernetes-models/apps/v1';
import * as autoscaling from 'kubernetes-models/autoscaling/v2';
import * as networking from 'kubernetes-models/networking.k8s.io/v1';
import * as policy from 'kubernetes-models/policy/v1';
import * as rbac from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { POD_SECURITY_LEVELS, podSecurityViolations, type PodSecurityLevel } from './pod-security.js';
import { DEPLOY, render, type K8sObject } from './render.js';

/**
 * Every overlay renders, every object is valid against the Kubernetes schemas (kubernetes-models:
 * the OpenAPI schemas of the Kubernetes release it is generated from) or its operator's CRD
 * schema, and the manifests keep the rules operators rely on: probes, requests and limits, a
 * non-root security context, env that the services really read, alerts on metrics that exist.
 */
const OVERLAYS = ['base', 'overlays/dev', 'overlays/prod', 'observability'] as const;

type Model = new (data: unknown) => { validate(): void };
/**
 * The schemas by apiVersion: core and built-in groups from kubernetes-models (generated from the
 * Kubernetes OpenAPI schemas), CRDs from their operator's models. An apiVersion missing here fails
 * the test: add its models.
 */
const MODELS: Record<string, Record<string, unknown>> = {
  v1: core,
  'apps/v1': apps,
  'autoscaling/v2': autoscaling,
  'networking.k8s.io/v1': networking,
  'policy/v1': policy,
  'rbac.authorization.k8s.io/v1': rbac,
  'monitoring.coreos.com/v1': monitoring,
  'external-secrets.io/v1': externalSecrets,
};

function modelOf(o: K8sObject): Model {
  const model = MODELS[o.apiVersion]?.[o.kind] as Model | undefined;
  if (!model) throw new Error(`no schema for ${o.apiVersion} ${o.kind}`);
  return model;
}

/**
 * kustomize wraps long base64 Secret values over lines, which the API server accepts (Go's base64
 * decoder skips newlines) and the schema's strict `byte` format does not: joined before validating.
 */
function withoutBase64Breaks(o: K8sObject): K8sObject {
  if (o.kind !== 'Secret' || !o.data) return o;
  return { ...o, data: Object.fromEntries(Object.entries(o.data as Record<string, string>).map(([k, v]) => [k, v.replace(/\s+/g, '')])) };
}

const rendered = Object.fromEntries(OVERLAYS.map((o) => [o, render(o)])) as Record<(typeof OVERLAYS)[number], K8sObject[]>;
const workloads = (objs: K8sObject[]) => objs.filter((o) => o.kind === 'Deployment' || o.kind === 'StatefulSet');

/** Each service's env schema, by container name. */
const ENV_SCHEMAS: Record<string, z.ZodObject> = {
  gateway: GatewayEnv as unknown as z.ZodObject,
  mcp: McpEnv as unknown as z.ZodObject,
  orchestrator: OrchestratorEnv as unknown as z.ZodObject,
  lifecycle: LifecycleEnv as unknown as z.ZodObject,
  holds: HoldsEnv as unknown as z.ZodObject,
};
/** Read by libraries the services load, not by their env schemas (OpenTelemetry's SDK, Node itself). */
const STANDARD_ENV = /^(OTEL_[A-Z_]+|NODE_ENV|NODE_OPTIONS|HOME)$/;

describe.each(OVERLAYS)('deploy/%s', (overlay) => {
  const objs = rendered[overlay];

  it('renders and every object validates against its schema', () => {
    expect(objs.length).toBeGreaterThan(0);
    const errors: string[] = [];
    for (const o of objs) {
      try {
        new (modelOf(o))(withoutBase64Breaks(o)).validate();
      } catch (e) {
        errors.push(`${o.kind}/${o.metadata.name}: ${(e as Error).message}`);
      }
    }
    expect(errors).toEqual([]);
  });

  it('every workload has probes, resource requests and limits, and a locked-down security context', () => {
    const problems: string[] = [];
    for (const w of workloads(objs)) {
      const pod = w.spec.template.spec;
      for (const c of pod.containers) {
        const where = `${w.kind}/${w.metadata.name}/${c.name}`;
        if (!c.readinessProbe || !c.livenessProbe) problems.push(`${where}: readiness and liveness probes`);
        if (!c.resources?.requests?.cpu || !c.resources?.requests?.memory) problems.push(`${where}: cpu and memory requests`);
        if (!c.resources?.limits?.memory) problems.push(`${where}: a memory limit`);
        if (c.securityContext?.allowPrivilegeEscalation !== false) problems.push(`${where}: allowPrivilegeEscalation false`);
        const root = c.securityContext?.runAsNonRoot === false || pod.securityContext?.runAsNonRoot !== true;
        // lifecycle alone runs as root, to give each execution a uid of its own (docs/security.md);
        // it keeps only the capabilities that needs.
        if (root && c.name !== 'lifecycle') problems.push(`${where}: runAsNonRoot`);
        if (!(c.securityContext?.capabilities?.drop ?? []).includes('ALL')) problems.push(`${where}: drop ALL capabilities`);
      }
    }
    expect(problems).toEqual([]);
  });

  it('runs every Deployment and StatefulSet under a ServiceAccount of its own that mounts no API token (unless a role is bound to it)', () => {
    const problems: string[] = [];
    const nsOf = (o: K8sObject) => (o.metadata as { namespace?: string }).namespace ?? '';
    const accounts = new Map(objs.filter((o) => o.kind === 'ServiceAccount').map((sa) => [`${nsOf(sa)}/${sa.metadata.name}`, sa]));
    // Accounts some (Cluster)RoleBinding grants API access to: only these may carry a token.
    const bound = new Set(
      objs
        .filter((o) => o.kind === 'RoleBinding' || o.kind === 'ClusterRoleBinding')
        .flatMap((b) =>
          (b.subjects ?? [])
            .filter((s: { kind: string }) => s.kind === 'ServiceAccount')
            .map((s: { name: string; namespace?: string }) => `${s.namespace ?? nsOf(b)}/${s.name}`),
        ),
    );
    const users = new Map<string, string[]>();
    for (const w of workloads(objs)) {
      const pod = w.spec.template.spec;
      const where = `${w.kind}/${w.metadata.name}`;
      const name = pod.serviceAccountName as string | undefined;
      if (!name || name === 'default') {
        problems.push(`${where}: serviceAccountName of its own`);
        continue;
      }
      const key = `${nsOf(w)}/${name}`;
      users.set(key, [...(users.get(key) ?? []), where]);
      const sa = accounts.get(key);
      if (!sa) problems.push(`${where}: ServiceAccount ${key} is not in the render`);
      if (bound.has(key)) continue;
      if (pod.automountServiceAccountToken !== false) problems.push(`${where}: automountServiceAccountToken false on the pod`);
      if (sa && sa.automountServiceAccountToken !== false) problems.push(`ServiceAccount ${key}: automountServiceAccountToken false`);
    }
    for (const [key, who] of users) if (who.length > 1) problems.push(`ServiceAccount ${key} is shared by ${who.join(', ')}`);
    expect(problems).toEqual([]);
    // The rule above is not vacuous where it matters: the five services and NATS each have one.
    if (overlay !== 'observability')
      for (const svc of ['gateway', 'mcp', 'orchestrator', 'holds', 'lifecycle', 'nats']) expect(accounts.has(`kandev/${svc}`), svc).toBe(true);
  });

  it('labels every namespace for Pod Security admission, and every pod meets what its namespace enforces', () => {
    const problems: string[] = [];
    const namespaces = objs.filter((o) => o.kind === 'Namespace');
    expect(namespaces.length).toBeGreaterThan(0);
    const enforced = new Map<string, PodSecurityLevel>();
    for (const ns of namespaces) {
      const labels = ns.metadata.labels ?? {};
      for (const mode of ['enforce', 'audit', 'warn']) {
        const level = labels[`pod-security.kubernetes.io/${mode}`] as PodSecurityLevel | undefined;
        if (!level || !POD_SECURITY_LEVELS.includes(level)) problems.push(`Namespace/${ns.metadata.name}: pod-security.kubernetes.io/${mode}`);
        if (!labels[`pod-security.kubernetes.io/${mode}-version`]) problems.push(`Namespace/${ns.metadata.name}: pod-security.kubernetes.io/${mode}-version`);
      }
      enforced.set(ns.metadata.name, labels['pod-security.kubernetes.io/enforce'] as PodSecurityLevel);
    }
    for (const w of workloads(objs)) {
      const ns = (w.metadata as { namespace?: string }).namespace!;
      const pod = w.spec.template.spec;
      const level = enforced.get(ns);
      if (level) for (const v of podSecurityViolations(pod, level)) problems.push(`${w.kind}/${w.metadata.name} (${ns}, ${level}): ${v}`);
      // Everything but lifecycle meets `restricted` wherever it runs; lifecycle misses `baseline`
      // by DAC_READ_SEARCH alone (deploy/base/namespace.yaml says why the namespace is privileged).
      const restricted = podSecurityViolations(pod, 'restricted');
      if (w.metadata.name !== 'lifecycle') for (const v of restricted) problems.push(`${w.kind}/${w.metadata.name}: restricted: ${v}`);
      else expect(podSecurityViolations(pod, 'baseline')).toEqual(['lifecycle: adds capability DAC_READ_SEARCH']);
    }
    expect(problems).toEqual([]);
  });

  it('sets only env variables the services read, and every one they require', () => {
    const configMaps = new Map(objs.filter((o) => o.kind === 'ConfigMap').map((o) => [o.metadata.name, Object.keys(o.data ?? {})]));
    const secrets = new Map([
      ...objs.filter((o) => o.kind === 'Secret').map((o) => [o.metadata.name, Object.keys({ ...o.data, ...o.stringData })] as const),
      ...objs
        .filter((o) => o.kind === 'ExternalSecret')
        .map((o) => [o.spec.target?.name ?? o.metadata.name, (o.spec.data ?? []).map((d: { secretKey: string }) => d.secretKey)] as const),
    ]);
    const problems: string[] = [];
    for (const w of workloads(objs)) {
      for (const c of w.spec.template.spec.containers) {
        const schema = ENV_SCHEMAS[c.name];
        if (!schema) continue; // not one of ours (nats)
        // A service reads the token keys it holds outside its env schema (packages/runtime/src/keys.ts).
        const keys = (SERVICE_KEYS[c.name as keyof typeof SERVICE_KEYS] ?? []).map((k) => KEY_ENV[k]);
        const own: string[] = (c.env ?? []).map((e: { name: string }) => e.name);
        // lifecycle also reads, outside its schema, the agent catalogue's path (agentctl's loader, in
        // its process) and hands the variables AGENT_ENV_PASSTHROUGH names to its agents (provider keys).
        const passed =
          c.name === 'lifecycle'
            ? String((c.env ?? []).find((e: { name: string }) => e.name === 'AGENT_ENV_PASSTHROUGH')?.value ?? '')
                .split(',')
                .filter(Boolean)
            : [];
        const readOutsideSchema = c.name === 'lifecycle' ? [CATALOGUE_ENV, ...passed] : [];
        const known = new Set([...Object.keys(schema.shape), ...keys, ...readOutsideSchema]);
        const fromRefs = (c.envFrom ?? []).flatMap((r: any) =>
          r.configMapRef ? (configMaps.get(r.configMapRef.name) ?? []) : (secrets.get(r.secretRef?.name) ?? []),
        );
        // The shared ConfigMap carries every service's settings; a name no service reads is a typo.
        const anyService = new Set([...Object.values(ENV_SCHEMAS).flatMap((s) => Object.keys(s.shape)), ...Object.values(KEY_ENV), SHARED_KEY_ENV]);
        for (const name of fromRefs)
          if (!anyService.has(name) && !readOutsideSchema.includes(name) && !STANDARD_ENV.test(name))
            problems.push(`${w.metadata.name}: ${name} (shared config) is read by no service`);
        for (const name of own) if (!known.has(name) && !STANDARD_ENV.test(name)) problems.push(`${w.metadata.name}: ${name} is not read by ${c.name}`);
        const set = new Set([...fromRefs, ...own]);
        // A key the service does not hold must not reach it (an agent-signing key in the gateway, say).
        for (const name of [...Object.values(KEY_ENV), SHARED_KEY_ENV])
          if (set.has(name) && !keys.includes(name)) problems.push(`${w.metadata.name}: holds ${name}, a key ${c.name} must not have`);
        for (const name of keys) if (!set.has(name)) problems.push(`${w.metadata.name}: its key ${name} is not set`);
        for (const [name, field] of Object.entries(schema.shape)) {
          if (!(field as z.ZodType).safeParse(undefined).success && !set.has(name)) problems.push(`${w.metadata.name}: required ${name} is not set`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it('gives each service its own NATS password and bus key, and every service the bus public keys (ADR 0054, 0055)', () => {
    const problems: string[] = [];
    for (const w of workloads(objs)) {
      for (const c of w.spec.template.spec.containers) {
        if (!ENV_SCHEMAS[c.name]) continue;
        const ref = (name: string) => (c.env ?? []).find((e: { name: string }) => e.name === name)?.valueFrom?.secretKeyRef;
        const want: Array<[string, string, string]> = [
          ['NATS_PASS', 'kandev-nats-users', c.name],
          ['KANDEV_BUS_KEY', 'kandev-bus-keys', c.name],
          ['KANDEV_BUS_PUBLIC_KEYS', 'kandev-bus-keys', 'public-keys'],
        ];
        for (const [name, secret, key] of want) {
          const r = ref(name);
          // kustomize appends a content hash to a generated Secret's name (not in prod).
          if (!(r?.name === secret || String(r?.name).startsWith(`${secret}-`)) || r?.key !== key)
            problems.push(`${w.metadata.name}: ${name} from ${JSON.stringify(r ?? null)}, want ${secret}/${key}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });
});

describe('deploy/overlays/prod', () => {
  const objs = rendered['overlays/prod'];

  it('holds no secret values and pins the image to a version', () => {
    expect(objs.filter((o) => o.kind === 'Secret')).toEqual([]);
    for (const w of workloads(objs))
      for (const c of w.spec.template.spec.containers) expect(c.image, `${w.metadata.name}/${c.name}`).toMatch(/(:\d[\w.-]*|@sha256:[0-9a-f]{64})$/);
  });

  it('autoscales the stateless services, spreads every one, and starts from default-deny', () => {
    expect(
      objs
        .filter((o) => o.kind === 'HorizontalPodAutoscaler')
        .map((o) => o.spec.scaleTargetRef.name)
        .sort(),
    ).toEqual(['gateway', 'holds', 'mcp', 'orchestrator']);
    for (const w of objs.filter((o) => o.kind === 'Deployment'))
      expect(w.spec.template.spec.topologySpreadConstraints?.length, w.metadata.name).toBeGreaterThan(0);
    const deny = objs.find((o) => o.kind === 'NetworkPolicy' && o.metadata.name === 'default-deny');
    expect(deny?.spec).toEqual({ podSelector: {}, policyTypes: ['Ingress', 'Egress'] });
    expect(objs.filter((o) => o.kind === 'PodDisruptionBudget').length).toBeGreaterThanOrEqual(5);
  });

  it('every alert names a metric the services export, and every expression parses as PromQL we can read', async () => {
    const rule = objs.find((o) => o.kind === 'PrometheusRule')!;
    const exported = new Set((await registry.getMetricsAsJSON()).flatMap((m) => [m.name, `${m.name}_count`, `${m.name}_sum`, `${m.name}_bucket`]));
    // Synthesised by Prometheus for every target, not exported.
    exported.add('up');
    for (const n of NATS_EXPORTER_METRICS) exported.add(n);
    const alerts = rule.spec.groups.flatMap((g: { rules: { alert: string; expr: string }[] }) => g.rules);
    expect(alerts.length).toBeGreaterThan(5);
    const missing: string[] = [];
    for (const a of alerts) {
      expect(balanced(a.expr), `${a.alert}: unbalanced brackets`).toBe(true);
      for (const name of metricNames(a.expr)) if (!exported.has(name)) missing.push(`${a.alert}: ${name}`);
    }
    expect(missing).toEqual([]);
  });

  it.each(['kandev-dashboard.json', 'kandev-product-dashboard.json'])(
    'the Grafana dashboard %s is valid JSON whose queries use exported metrics, shipped as a labelled ConfigMap',
    async (file) => {
      const dash = JSON.parse(readFileSync(join(DEPLOY, 'overlays/prod', file), 'utf8')) as {
        panels: { title: string; targets: { expr: string }[] }[];
      };
      const exported = new Set([
        ...(await registry.getMetricsAsJSON()).flatMap((m) => [m.name, `${m.name}_count`, `${m.name}_bucket`]),
        ...NATS_EXPORTER_METRICS,
      ]);
      const missing = dash.panels.flatMap((p) =>
        p.targets.flatMap((t) =>
          metricNames(t.expr)
            .filter((n) => !exported.has(n))
            .map((n) => `${p.title}: ${n}`),
        ),
      );
      expect(dash.panels.length).toBeGreaterThan(3);
      expect(missing).toEqual([]);
      const cm = objs.find((o) => o.kind === 'ConfigMap' && o.data?.[file]);
      expect(cm?.metadata.labels?.grafana_dashboard, `${file} in a ConfigMap for Grafana's sidecar`).toBe('1');
    },
  );

  it('scrapes NATS through the prometheus-nats-exporter sidecar, pinned, on a port the PodMonitor names and the network policy opens', () => {
    const nats = objs.find((o) => o.kind === 'StatefulSet' && o.metadata.name === 'nats')!;
    const exporter = nats.spec.template.spec.containers.find((c: { name: string }) => c.name === 'nats-exporter');
    expect(exporter?.image).toMatch(/^natsio\/prometheus-nats-exporter:\d+\.\d+\.\d+$/);
    expect(exporter.args).toEqual(expect.arrayContaining(['-varz', '-jsz=all', 'http://localhost:8222']));
    const port = exporter.ports.find((p: { name: string }) => p.name === 'metrics').containerPort;
    const monitor = objs.find((o) => o.kind === 'PodMonitor' && o.metadata.name === 'nats')!;
    expect(monitor.spec.selector.matchLabels).toEqual({ 'app.kubernetes.io/name': 'nats' });
    expect(monitor.spec.podMetricsEndpoints.map((e: { port: string }) => e.port)).toEqual(['metrics']);
    // The prod policy that lets the monitoring namespace in.
    const fromMonitoring = objs
      .filter((o) => o.kind === 'NetworkPolicy' && o.spec.podSelector?.matchLabels?.['app.kubernetes.io/name'] === 'nats')
      .flatMap((o) => o.spec.ingress as { from: { namespaceSelector?: unknown }[]; ports: { port: number }[] }[])
      .filter((r) => r.from.some((f) => JSON.stringify(f.namespaceSelector ?? '').includes('monitoring')));
    expect(fromMonitoring.flatMap((r) => r.ports.map((p) => p.port))).toContain(port);
  });
});

/**
 * What the NATS sidecar (natsio/prometheus-nats-exporter with `-varz -jsz=all`, deploy/nats) exports
 * that the alerts and dashboards read: its jsz collector's stream and consumer gauges and varz's
 * route count, under the names of the pinned release.
 */
const NATS_EXPORTER_METRICS = [
  'jetstream_consumer_num_pending',
  'jetstream_consumer_num_redelivered',
  'jetstream_consumer_num_ack_pending',
  'jetstream_server_total_message_bytes',
  'jetstream_server_max_storage',
  'gnatsd_varz_routes',
];

/** PromQL function and keyword names, which look like metric names to the scan below. */
const PROMQL_WORDS = new Set([
  'sum',
  'by',
  'without',
  'rate',
  'increase',
  'max',
  'min',
  'avg',
  'histogram_quantile',
  'count',
  'and',
  'or',
  'unless',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'offset',
  'bool',
  'le',
  'irate',
  'delta',
  'absent',
  'max_over_time',
]);

/** The metric names an expression reads: identifiers not inside braces or brackets, not functions, not label names. */
function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/\{[^}]*\}/g, '{}')
    .replace(/\[[^\]]*\]/g, '[]')
    .replace(/"[^"]*"/g, '""');
  const names = new Set<string>();
  for (const m of stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const word = m[0];
    const after = stripped.slice(m.index! + word.length).trimStart();
    if (PROMQL_WORDS.has(word) || after.startsWith('(')) continue;
    // A label list: `by (endpoint, code)`.
    const before = stripped.slice(0, m.index).trimEnd();
    if (/\b(by|without|on|ignoring)\s*\([^)]*$/.test(before)) continue;
    if (/^\d/.test(word)) continue;
    names.add(word);
  }
  return [...names].filter((n) => n.includes('_'));
}

function balanced(expr: string): boolean {
  const pairs: Record<string, string> = { ')': '(', ']': '[', '}': '{' };
  const stack: string[] = [];
  for (const ch of expr.replace(/"[^"]*"/g, '')) {
    if ('([{'.includes(ch)) stack.push(ch);
    else if (ch in pairs && stack.pop() !== pairs[ch]) return false;
  }
  return stack.length === 0;
}
