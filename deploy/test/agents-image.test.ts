import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join, posix } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CATALOGUE_ENV, CatalogueFile } from '@kandev/agentctl';
import { LifecycleEnv } from '@kandev/lifecycle/env';
import { deriveAgentsLock, renderLock, type AgentsManifest, type Lockfile } from './agents-lock.js';
import { inContext, parseDockerfile } from './dockerfile.js';
import { DEPLOY, render } from './render.js';

/**
 * The lifecycle image with the published agents (Dockerfile target `agents`) and the manifests that
 * run it (deploy/components/real-agents, used by overlays/prod), checked by reading them: the agents
 * are the versions agents-e2e tests, their lockfile is agents-e2e's, the Dockerfile's stages and
 * copies hold together, and the rendered Deployment points at what the image installs and sets what
 * lifecycle reads. Building the images and starting what they hold is `npm run test:image`
 * (scripts/test-image.mjs, run by .ci/run after npm test).
 */
const REPO = join(DEPLOY, '..');
const AGENTS_DIR = join(DEPLOY, 'docker/agents');
const readJson = <T>(path: string): T => JSON.parse(readFileSync(path, 'utf8')) as T;

const manifest = readJson<AgentsManifest>(join(AGENTS_DIR, 'package.json'));
// The agents are not in the repository's lockfile: agents-e2e installs them from its own.
const e2eLock = readJson<Lockfile>(join(REPO, 'agents-e2e/package-lock.json'));
const e2ePins = readJson<{ dependencies: Record<string, string> }>(join(REPO, 'agents-e2e/package.json')).dependencies;

describe('the agents of the image', () => {
  it('are exactly the versions agents-e2e pins (Codex CLI, the Claude Code ACP adapter), never a range or a tag', () => {
    expect(Object.keys(manifest.dependencies).sort()).toEqual(['@openai/codex', '@zed-industries/claude-code-acp']);
    for (const [name, version] of Object.entries(manifest.dependencies)) {
      expect(version, name).toMatch(/^\d+\.\d+\.\d+$/);
      expect(version, `${name}: agents-e2e pins ${e2ePins[name]}`).toBe(e2ePins[name]);
      expect(e2eLock.packages[`node_modules/${name}`]?.version, `${name} in agents-e2e/package-lock.json`).toBe(version);
    }
  });

  it('install from a lockfile that is agents-e2e’s lockfile’s own subtree (same versions and integrity hashes)', () => {
    const derived = renderLock(deriveAgentsLock(e2eLock, manifest));
    const path = join(AGENTS_DIR, 'package-lock.json');
    if (process.env.UPDATE_AGENTS_LOCK) writeFileSync(path, derived);
    expect(readFileSync(path, 'utf8'), 'deploy/docker/agents/package-lock.json is stale: UPDATE_AGENTS_LOCK=1 npx vitest run test/agents-image.test.ts').toBe(
      derived,
    );
    const lock = readJson<Lockfile>(path);
    for (const [key, entry] of Object.entries(lock.packages)) {
      if (key === '') continue;
      expect(entry.integrity ?? entry.link, key).toBe(e2eLock.packages[key]!.integrity ?? e2eLock.packages[key]!.link);
    }
  });
});

describe('deploy/docker/Dockerfile', () => {
  const dockerfile = readFileSync(join(DEPLOY, 'docker/Dockerfile'), 'utf8');
  const ignore = readFileSync(join(DEPLOY, 'docker/Dockerfile.dockerignore'), 'utf8');
  const { args, stages } = parseDockerfile(dockerfile);
  const stage = (name: string) => stages.find((s) => s.name === name);

  it('parses into stages whose FROMs name earlier stages or pinned base images; the default target is the image without agents', () => {
    expect(stages.map((s) => s.name)).toEqual(['build', 'runtime', 'agents-install', 'agents', 'control-plane']);
    stages.forEach((s, i) => {
      const earlier = stages.slice(0, i).map((x) => x.name);
      if (!earlier.includes(s.from)) expect(s.from, `stage ${s.name}`).toMatch(/^[\w./-]+:\d[\w.-]*$/);
    });
    // Every stage that does not start from an earlier one starts from the one base argument, Node 24
    // by default (CI builds on a base of its own through it, scripts/test-image.mjs).
    expect(args).toEqual({ NODE_IMAGE: 'node:24-slim' });
    const bases = stages.filter((s, i) => !stages.slice(0, i).some((x) => x.name === s.from));
    expect(bases.map((s) => [s.name, s.fromAsWritten])).toEqual([
      ['build', '${NODE_IMAGE}'],
      ['runtime', '${NODE_IMAGE}'],
      ['agents-install', '${NODE_IMAGE}'],
    ]);
    const local = parseDockerfile(dockerfile, { NODE_IMAGE: 'localhost/kandev-test/base:1' }).stages;
    expect(local.filter((s) => bases.some((b) => b.name === s.name)).map((s) => s.from)).toEqual(Array(3).fill('localhost/kandev-test/base:1'));
    expect(stage('agents')!.from).toBe('runtime');
    expect(stages.at(-1)).toMatchObject({ name: 'control-plane', from: 'runtime', body: [] });
    expect(dockerfile).not.toMatch(/:latest\b/);
  });

  it('the agents stage installs from the pinned manifest and lockfile with npm ci, which the build context holds', () => {
    const install = stage('agents-install')!;
    const copies = install.body.filter((i) => i.op === 'COPY').flatMap((i) => i.args.split(/\s+/).slice(0, -1));
    expect(copies.sort()).toEqual(['deploy/docker/agents/package-lock.json', 'deploy/docker/agents/package.json']);
    for (const c of copies) {
      expect(existsSync(join(REPO, c)), c).toBe(true);
      expect(inContext(ignore, c), `${c} is in the build context`).toBe(true);
    }
    expect(inContext(ignore, 'deploy/base/secrets.env'), 'the rest of deploy/ stays out of the context').toBe(false);
    expect(install.body.find((i) => i.op === 'RUN')?.args).toMatch(/^npm ci\b/);
    expect(dockerfile).not.toMatch(/npm (i|install)\b.*(-g|--global)/);
    const workdir = install.body.find((i) => i.op === 'WORKDIR')!.args;
    expect(stage('agents')!.body).toContainEqual({ op: 'COPY', args: `--from=agents-install ${workdir} ${workdir}` });
    expect(stage('agents')!.body.at(-1)).toEqual({ op: 'USER', args: 'node' });
  });

  it('the image is laid out by scripts/image-layout.mjs (what e2e runs a stack from) and copies nothing else from the build', () => {
    const build = stage('build')!;
    const runs = build.body.filter((i) => i.op === 'RUN').map((i) => i.args);
    expect(runs.at(-1)).toBe('node scripts/image-layout.mjs /out');
    expect(runs).toContain('node scripts/bundle.mjs gateway mcp orchestrator lifecycle holds drain agentctl');
    expect(dockerfile).not.toMatch(/npm prune/);
    const copied = build.body.filter((i) => i.op === 'COPY').flatMap((i) => i.args.split(/\s+/).slice(0, -1));
    for (const script of ['scripts/image-layout.mjs', 'scripts/bundle.mjs']) {
      expect(copied, script).toContain(script);
      expect(existsSync(join(REPO, script)), script).toBe(true);
      expect(inContext(ignore, script), `${script} is in the build context`).toBe(true);
    }
    expect(stage('runtime')!.body.filter((i) => i.op === 'COPY')).toEqual([{ op: 'COPY', args: '--from=build /out /app' }]);
  });

  it('copies no tsconfig into the build whose references it does not copy too (the bundler loads them: "Tsconfig not found")', () => {
    const copied = stage('build')!
      .body.filter((i) => i.op === 'COPY' && !i.args.startsWith('--from'))
      .flatMap((i) => i.args.split(/\s+/).slice(0, -1));
    const isCopied = (path: string) => copied.some((c) => path === c || path.startsWith(`${c}/`));
    const tsconfigs = copied.filter((c) => /^tsconfig.*\.json$/.test(c));
    expect(tsconfigs.length, 'the build copies tsconfig.base.json at least').toBeGreaterThan(0);
    for (const file of tsconfigs) {
      const references = (readJson<{ references?: Array<{ path: string }> }>(join(REPO, file)).references ?? []).map((r) => posix.normalize(r.path));
      for (const r of references) expect(isCopied(r), `${file} references ${r}, which the build does not copy`).toBe(true);
    }
  });
});

describe('deploy/overlays/prod: lifecycle with real agents', () => {
  const objs = render('overlays/prod');
  const deployment = objs.find((o) => o.kind === 'Deployment' && o.metadata.name === 'lifecycle')!;
  const pod = deployment.spec.template.spec;
  const container = pod.containers.find((c: { name: string }) => c.name === 'lifecycle');
  const env = Object.fromEntries(
    (container.env as Array<{ name: string; value?: string }>).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]),
  );
  const installDir = '/opt/kandev-agents';

  it('runs the agents image at the release the other services run', () => {
    const others = objs
      .filter((o) => o.kind === 'Deployment' && o.metadata.name !== 'lifecycle')
      .map((o) => o.spec.template.spec.containers[0].image as string);
    const tag = others[0]!.split(':')[1];
    expect(container.image).toBe(`kandev/control-plane-agents:${tag}`);
    expect(readFileSync(join(DEPLOY, 'docker/Dockerfile'), 'utf8')).toContain(`WORKDIR ${installDir}\n`);
  });

  it('reads its catalogue from the ConfigMap file, whose agents are commands the image installs', () => {
    const path = env[CATALOGUE_ENV]!;
    const mount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === posix.dirname(path));
    expect(mount, `a volume mounted at ${posix.dirname(path)}`).toBeDefined();
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name);
    const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volume.configMap.name)!;
    const catalogue = CatalogueFile.parse(JSON.parse(cm.data[basename(path)]));
    expect(Object.keys(catalogue).sort()).toEqual(['claude-code', 'codex']);
    const bins = new Set(
      Object.keys(manifest.dependencies).flatMap((name) => {
        const bin = e2eLock.packages[`node_modules/${name}`]!.bin;
        return typeof bin === 'object' ? Object.keys(bin) : [];
      }),
    );
    for (const [name, entry] of Object.entries(catalogue)) {
      expect(posix.dirname(entry.command), name).toBe(`${installDir}/node_modules/.bin`);
      expect(bins.has(posix.basename(entry.command)), `${name}: ${entry.command} is a bin of a pinned package`).toBe(true);
    }
  });

  it("mounts every settings file its catalogue names (settings_from), from a ConfigMap key, so lifecycle's start-up check passes", () => {
    const path = env[CATALOGUE_ENV]!;
    const volumeOf = (name: string) => pod.volumes.find((v: { name: string }) => v.name === name);
    const catalogueMount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === posix.dirname(path));
    const cm = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volumeOf(catalogueMount.name).configMap.name)!;
    const catalogue = CatalogueFile.parse(JSON.parse(cm.data[basename(path)]));
    const sources = Object.values(catalogue).flatMap((e) => (e.settings_from ? [e.settings_from.source].flat() : []));
    // Claude Code needs its settings.json: without it every kandev MCP call waits for an operator.
    expect(catalogue['claude-code']!.settings_from).toMatchObject({ home_path: '.claude' });
    expect(sources.length).toBeGreaterThan(0);
    for (const source of sources) {
      const mount = container.volumeMounts.find((m: { mountPath: string }) => source.startsWith(`${m.mountPath}/`));
      expect(mount, `${source} is under a mounted volume`).toBeDefined();
      const volume = volumeOf(mount.name);
      const item = (volume.configMap.items ?? []).find((i: { path: string }) => `${mount.mountPath}/${i.path}` === source);
      expect(item, `${source} is an item of ConfigMap ${volume.configMap.name}`).toBeDefined();
      const data = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name === volume.configMap.name)!.data;
      expect(() => JSON.parse(data[item.key]), `${item.key} is JSON`).not.toThrow();
    }
  });

  it('hands agents exactly the provider keys of its Secret (an ExternalSecret in prod)', () => {
    const passthrough = env.AGENT_ENV_PASSTHROUGH!.split(',');
    const ext = objs.find((o) => o.kind === 'ExternalSecret' && o.spec.target.name === 'kandev-agent-providers')!;
    expect(container.envFrom).toContainEqual({ secretRef: { name: 'kandev-agent-providers' } });
    expect(ext.spec.data.map((d: { secretKey: string }) => d.secretKey).sort()).toEqual([...passthrough].sort());
    expect(passthrough.sort()).toEqual(['ANTHROPIC_API_KEY', 'OPENAI_API_KEY']);
  });

  it('caps executions, drains on preStop, and its grace period outlasts the drain and the shutdown', () => {
    const parsed = LifecycleEnv.parse(env);
    expect(parsed.MAX_EXECUTIONS).toBeGreaterThan(0);
    // The image's WORKDIR is /app (deploy/docker/Dockerfile); the hook names the file absolutely.
    expect(container.lifecycle.preStop.exec.command).toEqual(['node', '/app/services/lifecycle/dist/drain.bundle.js']);
    expect(readFileSync(join(DEPLOY, 'docker/Dockerfile'), 'utf8')).toContain('WORKDIR /app\n');
    expect(existsSync(join(REPO, 'services/lifecycle/dist/drain.bundle.js')), 'the drain command is built').toBe(true);
    // The drain: wait + grace + its 15 s teardown margin; then SIGTERM and the shutdown (SHUTDOWN_TIMEOUT_MS).
    const needMs = parsed.DRAIN_WAIT_MS + parsed.TEARDOWN_GRACE_MS + 15_000 + parsed.SHUTDOWN_TIMEOUT_MS;
    expect(pod.terminationGracePeriodSeconds * 1000).toBeGreaterThanOrEqual(needMs);
    // The agents' memory: the cap times ~1 Gi each fits the limit.
    expect(container.resources.limits.memory).toBe(`${parsed.MAX_EXECUTIONS}Gi`);
  });

  it('keeps KANDEV_WORK_DIR on an emptyDir with a size limit (a task directory lives as long as its execution)', () => {
    const workDir = objs.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('kandev-config'))!.data.KANDEV_WORK_DIR;
    const mount = container.volumeMounts.find((m: { mountPath: string }) => m.mountPath === workDir);
    const volume = pod.volumes.find((v: { name: string }) => v.name === mount.name);
    expect(volume.emptyDir?.sizeLimit).toBeDefined();
  });
});
