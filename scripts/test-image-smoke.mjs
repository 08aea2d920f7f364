// The smoke test of the built images (scripts/test-image.mjs). `podman run` is refused by this
// machine's sandbox (crun cannot set RLIMIT_NOFILE), so each image's filesystem is mounted instead
// (`podman image mount`: read-only, as the pods' root filesystem is) and what the image runs is
// started in it under chroot, as its configured user, with its entrypoint, working directory and
// environment, read from the image's own configuration. /proc, /dev and a writable /tmp (the pods'
// volumes) are bound in. The services join a nats-server and a database of the test's own (the test
// kit's fixtures; the database unmigrated, so the image's migrations run).
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { BUS_KEY_ENV, BUS_PUBLIC_KEYS_ENV, KEY_ENV, SERVICE_KEYS, generateBusKeys } from '@kandev/runtime';
import { STACK_SERVICES, createTestDatabase, natsLogin, startNats } from '@kandev/testkit';

const START_TIMEOUT_MS = 60_000;
const READY_TIMEOUT_MS = 60_000;
// A service's SHUTDOWN_TIMEOUT_MS (10 s by default) plus headroom for a loaded machine.
const STOP_TIMEOUT_MS = 25_000;

/**
 * @typedef {import('@kandev/testkit').StackService} StackService
 * @typedef {Set<import('node:child_process').ChildProcess>} Children the children running now (scripts/test-image.mjs ends them on a signal)
 * @typedef {(msg: string) => void} Log
 * @typedef {(step: string, cmd: string, args: string[], opts?: { timeoutMs?: number }) => Promise<string>} Run
 *   run a command to completion (scripts/test-image.mjs): its stdout; a failure throws, naming the step
 * @typedef {{ Entrypoint?: string[] | null, Env?: string[], User?: string, WorkingDir?: string }} ImageConfig
 *   what is read here of the image's configuration (`podman image inspect`'s Config)
 * @typedef {{ uid: number, gid: number, home: string | undefined }} ImageUser
 * @typedef {{ root: string, config: ImageConfig, user: ImageUser, release: () => Promise<void> }} MountedImage
 * @typedef {{ code: number | null, signal: NodeJS.Signals | null }} Exit
 * @typedef {import('node:child_process').ChildProcessByStdio<import('node:stream').Writable, import('node:stream').Readable, import('node:stream').Readable>} Child
 * @typedef {{ child: Child, tail: string[], keep: (line: string) => void, exited: Promise<Exit> }} Proc
 */

/** @returns {Promise<number>} */
const freePort = () =>
  new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      // Listening on TCP: an address and port, not a pipe's name.
      const { port } = /** @type {import('node:net').AddressInfo} */ (s.address());
      s.close(() => resolve(port));
    });
  });

/** The releases of the images mounted now. */
const mounted = /** @type {Set<() => Promise<void>>} */ (new Set());
/** Unmount whatever is still mounted (a run interrupted by a signal). */
export async function releaseMounts() {
  for (const release of [...mounted]) await release();
}

/**
 * An image mounted with what a process in it needs bound in; `release()` undoes it all, in reverse.
 * @param {Run} run
 * @param {string} image
 * @param {string} dir
 * @returns {Promise<MountedImage>}
 */
async function mountImage(run, image, dir) {
  /**
   * @param {string} step
   * @param {string[]} args
   */
  const podman = (step, args) => run(step, 'podman', args, { timeoutMs: 60_000 });
  const undo = /** @type {Array<() => Promise<unknown>>} */ ([]);
  const release = async () => {
    mounted.delete(release);
    for (const step of undo.splice(0).reverse()) await step().catch((/** @type {Error} */ e) => process.stderr.write(`[image] cleanup: ${e.message}\n`));
  };
  mounted.add(release);
  try {
    const root = (await podman('image-mount', ['image', 'mount', image])).trim();
    undo.push(() => podman('image-umount', ['image', 'umount', image]));
    const tmp = mkdtempSync(join(dir, 'tmp-'));
    chmodSync(tmp, 0o1777);
    for (const [source, target] of /** @type {[string, string][]} */ ([
      ['/proc', 'proc'],
      ['/dev', 'dev'],
      [tmp, 'tmp'],
    ])) {
      await run('bind', 'mount', ['--bind', source, join(root, target)], { timeoutMs: 60_000 });
      undo.push(() => run('unbind', 'umount', [join(root, target)], { timeoutMs: 60_000 }));
    }
    const [info] = /** @type {Array<{ Config?: ImageConfig | null }>} */ (JSON.parse(await podman('inspect', ['image', 'inspect', image])));
    if (!info) throw new Error(`podman image inspect ${image}: no image in its answer`);
    const config = info.Config ?? {};
    return { root, config, user: userOf(root, config.User || 'root'), release };
  } catch (e) {
    await release();
    throw e;
  }
}

/**
 * The image's USER (name or uid[:gid]) as numbers, from the image's own /etc/passwd.
 * @param {string} root
 * @param {string} spec
 * @returns {ImageUser}
 */
function userOf(root, spec) {
  const [user, group] = spec.split(':');
  const entry = readFileSync(join(root, 'etc/passwd'), 'utf8')
    .split('\n')
    .map((l) => l.split(':'))
    .find((f) => f[0] === user || f[2] === user);
  if (!entry) throw new Error(`the image's USER ${spec} is not in its /etc/passwd`);
  return { uid: Number(entry[2]), gid: group !== undefined ? Number(group) : Number(entry[3]), home: entry[5] };
}

/** @param {string[]} [list] `NAME=value` entries, as an image's Env has them */
const envList = (list = []) => Object.fromEntries(list.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));

/**
 * Start `command` inside the mounted image as its user, from its working directory, with its environment plus `env`.
 * @param {MountedImage} image
 * @param {string[]} command
 * @param {Record<string, string | undefined>} env
 * @param {{ children?: Children, cwd?: string }} [opts]
 * @returns {Proc}
 */
function startIn(image, command, env, { children, cwd } = {}) {
  const { root, config, user } = image;
  const child = spawn(
    'chroot',
    [`--userspec=${user.uid}:${user.gid}`, root, '/usr/bin/env', '-C', cwd ?? (config.WorkingDir || '/'), '--', ...command],
    // Only the image's environment and what the test sets: nothing of this machine's leaks in.
    { env: { HOME: user.home, ...envList(config.Env), ...env }, stdio: ['pipe', 'pipe', 'pipe'] },
  );
  children?.add(child);
  child.once('close', () => children?.delete(child));
  const tail = /** @type {string[]} */ ([]);
  /** @param {string} line */
  const keep = (line) => {
    tail.push(line);
    tail.splice(0, Math.max(0, tail.length - 30));
  };
  createInterface({ input: child.stderr }).on('line', keep);
  const exited = /** @type {Promise<Exit>} */ (new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal }))));
  return { child, tail, keep, exited };
}

/**
 * A process's first stdout line that satisfies `match` (its answer, not undefined), within `timeoutMs`; else the reason, with its last lines.
 * @template T
 * @param {Proc} proc
 * @param {string} what
 * @param {(line: string) => T | undefined} match
 * @param {number} timeoutMs
 * @returns {Promise<T>}
 */
function firstLine(proc, what, match, timeoutMs) {
  return new Promise((resolve, reject) => {
    /** @param {string} why */
    const fail = (why) => reject(new Error(`${what} ${why}:\n${proc.tail.join('\n')}`));
    const timer = setTimeout(() => {
      proc.child.kill('SIGKILL');
      fail(`gave no answer within ${timeoutMs / 1000} s`);
    }, timeoutMs);
    createInterface({ input: proc.child.stdout }).on('line', (line) => {
      proc.keep(line);
      const found = match(line);
      if (found !== undefined) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    void proc.exited.then(({ code, signal }) => {
      clearTimeout(timer);
      fail(`exited (${code ?? signal}) first`);
    });
  });
}

/**
 * A line's JSON value, or undefined when it is not JSON.
 * @param {string} line
 * @returns {any}
 */
const jsonLine = (line) => {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
};

/**
 * GET `url` until it answers 200 (within `timeoutMs`); the last answer or error is in the failure.
 * @param {string} url
 * @param {number} timeoutMs
 * @returns {Promise<string>} the body of the 200
 */
async function until200(url, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer';
  for (;;) {
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
      const body = await res.text();
      if (res.status === 200) return body;
      last = `${res.status} ${body.slice(0, 500)}`;
    } catch (e) {
      last = /** @type {Error} */ (e).message;
    }
    if (Date.now() > deadline) throw new Error(`GET ${url}: not 200 within ${timeoutMs / 1000} s; last: ${last}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * SIGTERM, as the kubelet sends it: the service must exit by itself, with status 0, within its bound.
 * @param {string} name
 * @param {Proc} proc
 */
async function stopService(name, proc) {
  if (proc.child.exitCode !== null || proc.child.signalCode !== null) throw new Error(`${name} had exited:\n${proc.tail.join('\n')}`);
  proc.child.kill('SIGTERM');
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  const { code, signal } = await proc.exited;
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${name} did not exit cleanly on SIGTERM within ${STOP_TIMEOUT_MS / 1000} s (${code ?? signal}):\n${proc.tail.join('\n')}`);
}

/**
 * The five services from the control-plane image, with the command their Deployments give
 * (`node services/<name>/dist/<name>.bundle.js` after the image's entrypoint, tini), plus lifecycle
 * from the agents image as the real-agents pods run it. Each logs that it started and answers
 * /healthz and /readyz on its HEALTH_PORT; the gateway's /readyz (every service answers its ping)
 * and its console answer too; each then stops on SIGTERM with status 0.
 * @param {{ controlPlane: string, agents: string, run: Run, dir: string, log: Log, children: Children }} opts
 *   the two images (references) and the runner's `run`, scratch directory, log and children
 */
export async function smokeControlPlane({ controlPlane, agents, run, dir, log, children }) {
  const [nats, db] = await Promise.all([startNats({ auth: true }), createTestDatabase({ migrated: false })]);
  const mounts = /** @type {MountedImage[]} */ ([]);
  const running = /** @type {Array<{ name: string, proc: Proc, healthPort: string }>} */ ([]);
  try {
    const cp = await mountImage(run, controlPlane, dir);
    mounts.push(cp);
    const ag = await mountImage(run, agents, dir);
    mounts.push(ag);
    const busKeys = generateBusKeys(STACK_SERVICES);
    const operatorKey = `image-smoke-operator-${'o'.repeat(32)}`;
    const agentKey = `image-smoke-agent-${'a'.repeat(32)}`;
    const ports = { gateway: await freePort(), mcp: await freePort() };
    /**
     * @param {StackService} name
     * @param {string} instance
     */
    const envOf = async (name, instance) => {
      const login = natsLogin(nats, name);
      /** @type {Record<string, string | undefined> & { HEALTH_PORT: string }} */
      const env = {
        NATS_URL: nats.url,
        NATS_USER: login.user,
        NATS_PASS: login.pass,
        [BUS_KEY_ENV]: busKeys.privateKeys[name],
        [BUS_PUBLIC_KEYS_ENV]: busKeys.publicKeys,
        DATABASE_URL: db.url,
        INSTANCE_ID: instance,
        HEALTH_PORT: String(await freePort()),
        GATEWAY_PORT: String(ports.gateway),
        MCP_PORT: String(ports.mcp),
        MCP_PUBLIC_URL: `http://127.0.0.1:${ports.mcp}/mcp`,
        // The pods' writable volumes are under /tmp here (the root filesystem is read-only).
        KANDEV_STATE_DIR: `/tmp/${instance}`,
        LOG_LEVEL: 'info',
        // tini is PID 1 in a pod; here it is not, so it registers as the subreaper instead.
        TINI_SUBREAPER: '1',
      };
      for (const kind of SERVICE_KEYS[name]) env[KEY_ENV[kind]] = kind === 'operator' ? operatorKey : agentKey;
      return env;
    };
    /**
     * @param {MountedImage} image
     * @param {StackService} name
     * @param {string} instance
     */
    const start = async (image, name, instance) => {
      const env = await envOf(name, instance);
      const command = [...(image.config.Entrypoint ?? []), 'node', `services/${name}/dist/${name}.bundle.js`];
      const proc = startIn(image, command, env, { children });
      const entry = { name: instance, proc, healthPort: env.HEALTH_PORT };
      running.push(entry);
      await firstLine(proc, `${instance} (${command.join(' ')})`, (l) => (jsonLine(l)?.msg === `${name} started` ? true : undefined), START_TIMEOUT_MS);
      return entry;
    };
    // mcp before lifecycle, which hands mcp's URL to its agents (as the test stacks start them).
    const started = await Promise.all([
      start(cp, 'orchestrator', 'orchestrator-1'),
      start(cp, 'holds', 'holds-1'),
      start(cp, 'gateway', 'gateway-1'),
      start(cp, 'mcp', 'mcp-1'),
    ]);
    started.push(await start(cp, 'lifecycle', 'lifecycle-1'), await start(ag, 'lifecycle', 'lifecycle-2'));
    for (const s of started) {
      await until200(`http://127.0.0.1:${s.healthPort}/healthz`, READY_TIMEOUT_MS);
      await until200(`http://127.0.0.1:${s.healthPort}/readyz`, READY_TIMEOUT_MS);
      log(`${s.name}: started from the image, /healthz and /readyz 200`);
    }
    const system = JSON.parse(await until200(`http://127.0.0.1:${ports.gateway}/readyz`, READY_TIMEOUT_MS));
    const missing = STACK_SERVICES.filter((s) => s !== 'gateway' && !(s in (system.services ?? {})));
    if (missing.length) throw new Error(`the gateway's /readyz lists no ${missing.join(', ')}: ${JSON.stringify(system)}`);
    const ui = await until200(`http://127.0.0.1:${ports.gateway}/ui/`, READY_TIMEOUT_MS);
    if (!/<html/i.test(ui)) throw new Error(`the gateway's /ui/ is not the console: ${ui.slice(0, 200)}`);
    log(`gateway /readyz 200 with ${Object.keys(system.services).join(', ')}; /ui/ serves the console`);
    for (const s of [...running].reverse()) await stopService(s.name, s.proc);
    running.length = 0;
    log('every service exited with status 0 on SIGTERM');
  } finally {
    for (const s of running) s.proc.child.kill('SIGKILL');
    await Promise.all(running.map((s) => s.proc.exited));
    for (const m of mounts.reverse()) await m.release();
    await Promise.all([nats.stop(), db.drop()]);
  }
}

/**
 * The agents image holds the agents at the pinned versions (deploy/docker/agents/package.json), on
 * its PATH, and each answers: Codex with `--version`; the Claude Code ACP adapter, which has no
 * `--version` (it starts an ACP server on stdio whatever its arguments), with its name and version in
 * its answer to ACP's `initialize`. git, which the agents need, is there too.
 * @param {{ image: string, run: Run, dir: string, log: Log, repo: string, children: Children }} opts
 *   the agents image (reference), the runner's `run`, scratch directory and log, the repository's root, the children
 */
export async function smokeAgents({ image, run, dir, log, repo, children }) {
  const pins = /** @type {{ dependencies?: Record<string, string> }} */ (JSON.parse(readFileSync(join(repo, 'deploy/docker/agents/package.json'), 'utf8')))
    .dependencies;
  if (!pins) throw new Error('deploy/docker/agents/package.json has no dependencies (the pinned agents)');
  const agentsImage = await mountImage(run, image, dir);
  try {
    /**
     * @template T
     * @param {string} what
     * @param {string[]} command
     * @param {string | undefined} input a line written to its stdin
     * @param {(line: string) => T | undefined} match
     * @returns {Promise<T>}
     */
    const answer = async (what, command, input, match) => {
      const proc = startIn(agentsImage, command, {}, { children, cwd: '/tmp' });
      if (input) proc.child.stdin.write(`${input}\n`);
      try {
        return await firstLine(proc, what, match, 60_000);
      } finally {
        proc.child.kill('SIGKILL');
        await proc.exited;
      }
    };
    const codex = await answer('codex --version', ['codex', '--version'], undefined, (l) => (l.trim() ? l.trim() : undefined));
    if (codex !== `codex-cli ${pins['@openai/codex']}`) throw new Error(`codex --version: ${codex}, not codex-cli ${pins['@openai/codex']}`);
    log(`agents: ${codex}`);
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: 1, clientCapabilities: {} } };
    const info = await answer('claude-code-acp (ACP initialize)', ['claude-code-acp'], JSON.stringify(init), (l) => {
      const msg = jsonLine(l);
      return msg?.id === 1 ? (msg.result?.agentInfo ?? msg) : undefined;
    });
    const pinned = pins['@zed-industries/claude-code-acp'];
    if (info.name !== '@zed-industries/claude-code-acp' || info.version !== pinned)
      throw new Error(`claude-code-acp answered initialize with ${JSON.stringify(info)}, not @zed-industries/claude-code-acp ${pinned}`);
    log(`agents: ${info.name} ${info.version} (ACP initialize)`);
    const git = await answer('git --version', ['git', '--version'], undefined, (l) => (l.startsWith('git version') ? l : undefined));
    log(`agents: ${git}`);
  } finally {
    await agentsImage.release();
  }
}
