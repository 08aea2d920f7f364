import { unavailable, validationError } from '@kandev/contracts';
import { checkWorkingDir, defaultTaskDir, taskHomeDir, type Logger } from '@kandev/runtime';
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { agentAccessProblems, agentTargets, isInside, refusal, type AccessProblem, type AgentPaths } from './agent-access.js';
import type { AgentNetwork } from './agent-network.js';
import { writeSettings, type AgentSettings } from './agent-settings.js';
import { chownIfOwnedBy, chownTreeAt, closeFd, openDirAt, openPathAt, openRoot, RefusedPath } from './dir-fd.js';
import { isolationMode, parseUidRange, pickFreeUid, type AgentIsolationMode, type UidRange } from '../domain/agent-uids.js';
import { hostSupport, liveUids } from '@kandev/runtime/host';
import { UidScan } from './uid-scan.js';

/*
 * Per-execution identity and per-task directory (SPEC, ADR 0017). Where this service may
 * change uids, each execution gets a uid/gid of AGENT_UID_RANGE for its agentctl and agent, its
 * task's directory (the agent's cwd) and home are chowned to it, and when the execution is over
 * every process left with that uid is killed before the uid can go to another execution.
 * Elsewhere agents share this service's uid (`same_uid`), which is said at start and in /readyz.
 */

export interface AgentIdentity {
  uid: number;
  gid: number;
}

/** Where and as whom one execution runs. */
export interface Placement {
  executionId: string;
  identity: AgentIdentity | null;
  /** The agent's working directory (its task's). */
  cwd: string;
  /** The agent's HOME (per task, beside the work dirs), with a private TMPDIR inside. */
  home: string;
  tmp: string;
}

export interface IsolationOptions {
  workRoot: string;
  uidRange: string;
  setting: 'auto' | 'off';
  log: Logger;
  /** Injected in tests; else this process's euid and CapEff. */
  probe?: { euid: number | null; capEff: bigint | null };
  /** Where instances of this host record which uid they hold; the host's one directory unless a test isolates itself. */
  uidLockDir?: string;
}

/**
 * One directory per host, whatever each instance's work root: a uid is the host's, and two lifecycle
 * instances with different KANDEV_WORK_DIRs (replicas, test stacks) must not both hand it out. Under
 * /run, so a reboot clears what crashed instances left (a lock whose process is gone is stale anyway).
 */
export const HOST_UID_LOCK_DIR = '/run/kandev/agent-uids';

/** Shared by every instance in this process (tests run several): a uid is a resource of the host. */
const heldInThisProcess = new Map<number, string>();

/** What `held` says of a uid taken back for a start-up sweep (no execution of this run holds it). */
const LEFTOVER_SWEEP = 'leftover sweep';

/** How long the final sweep of an execution's uid re-sends SIGKILL before it leaves the rest to the allocator's /proc check. */
const UID_SWEEP_MS = 3_000;

/**
 * The least time between two passes over /proc of the final sweeps: the teardowns of a tree hold
 * share a pass (uid-scan.ts); an execution's stopped event waits at most this long for its pass.
 */
const UID_SCAN_SPACING_MS = 250;

export class AgentIsolation {
  readonly mode: AgentIsolationMode;
  readonly why: string;
  readonly workRoot: string;
  private readonly range: UidRange;
  /** uid → the execution holding it (from before its spawn to the end of its teardown); per process, as uids are the host's. */
  private readonly held = heldInThisProcess;
  private cursor: number;
  private readonly log: Logger;
  private readonly lockDir: string;
  private readonly uidScan = new UidScan(UID_SCAN_SPACING_MS);
  /** The agents' loopback filter (ADR 0057), when the service set one up. */
  network: Pick<AgentNetwork, 'restrict' | 'release'> | null = null;

  constructor(opts: IsolationOptions) {
    const range = parseUidRange(opts.uidRange);
    if (typeof range === 'string') throw new Error(range);
    this.range = range;
    this.cursor = range.first;
    this.log = opts.log;
    this.workRoot = opts.workRoot;
    this.lockDir = opts.uidLockDir ?? HOST_UID_LOCK_DIR;
    const probe = opts.probe ?? hostSupport();
    const { mode, why } = isolationMode(probe, opts.setting);
    this.mode = mode;
    this.why = why;
  }

  /**
   * Start-up: the work root exists and is reachable (traverse only) by agent uids; this service's
   * own state (`stateDir/lifecycle`) is not. The state dir, and any ancestor of the work root inside
   * it, that agents cannot traverse is made traversable (o+x, never readable): agentctl writes its
   * after-death log under it. What lies outside the state dir is the operator's to change:
   * `agentAccessProblems` then names it, and the service refuses to start.
   */
  prepareRoots(stateDir: string, lifecycleDir: string): void {
    mkdirSync(lifecycleDir, { recursive: true, mode: 0o700 });
    try {
      chmodSync(lifecycleDir, 0o700);
    } catch (e) {
      this.log.warn({ err: e, dir: lifecycleDir }, "cannot make this service's state directory private (0700)");
    }
    mkdirSync(this.workRoot, { recursive: true, mode: 0o711 });
    if (this.mode === 'same_uid') {
      this.log.warn(
        { agent_isolation: this.mode, why: this.why },
        "agents run under this service's own uid: an agent can read this process's environment and signal other executions (docs/security.md)",
      );
      return;
    }
    const root = resolve(stateDir);
    for (const start of [this.workRoot, root]) {
      for (let dir = start; isInside(root, dir); dir = dirname(dir)) {
        const mode = statSync(dir).mode & 0o777;
        if ((mode & 0o001) === 0) {
          try {
            chmodSync(dir, mode | 0o001);
          } catch (e) {
            this.log.warn({ err: e, dir }, 'cannot make this directory traversable for agents (o+x)');
          }
        }
        if (dirname(dir) === dir) break;
      }
    }
    this.log.info(
      { agent_isolation: this.mode, why: this.why, uid_range: `${this.range.first}-${this.range.last}`, work_dir: this.workRoot },
      'agents run under a uid of their own per execution',
    );
  }

  /**
   * What agent uids could not reach of what they need: none where agents share this
   * service's uid. Checked at start-up (a problem refuses the start) and on every /readyz.
   */
  agentAccessProblems(paths: Omit<AgentPaths, 'workRoot'>): AccessProblem[] {
    if (this.mode === 'same_uid') return [];
    return agentAccessProblems(agentTargets({ ...paths, workRoot: this.workRoot }));
  }

  /** The refusal's words for `problems`. */
  refusal(problems: readonly AccessProblem[]): string {
    return refusal(problems, `${this.range.first}-${this.range.last}`);
  }

  /** The directory a launch runs in: the task's `working_dir` (checked again here, as text) or the default. */
  taskDir(workspaceId: string, taskId: string, workingDir: string | null | undefined): string {
    if (!workingDir) return defaultTaskDir(this.workRoot, workspaceId, taskId);
    const check = checkWorkingDir(this.workRoot, workingDir, workspaceId);
    if (!check.ok) throw validationError(check.reason, { working_dir: workingDir });
    return check.path;
  }

  /**
   * Before the spawn: a uid for the execution (isolated mode), its directories created and owned by
   * it. Throws VALIDATION_ERROR (a working_dir refused as text, or reached through a symbolic link or
   * a file: ADR 0056) or UNAVAILABLE (no free uid, directory trouble), having released what it took.
   * Both directories are opened by descriptor from the work root before any owner changes, so a
   * refused launch changes no file's owner. `settings` (the agent's `settings_from`, read already)
   * are written into the home while it is still root's, then chowned with it (agent-settings.ts).
   */
  async place(executionId: string, workspaceId: string, taskId: string, workingDir: string | null | undefined, settings?: AgentSettings): Promise<Placement> {
    const cwd = this.taskDir(workspaceId, taskId, workingDir);
    // Sharing this service's uid, an agent gains nothing from a home of its own, and keeps what
    // the user set up in theirs (a `claude login`); with a uid of its own it cannot use ours. An
    // agent with `settings_from` gets the task's home in both modes: its settings are copied there,
    // never over the user's own.
    const sharedHome = this.mode === 'same_uid' && !settings ? process.env.HOME : undefined;
    const home = sharedHome || taskHomeDir(this.workRoot, workspaceId, taskId);
    const tmp = sharedHome ? process.env.TMPDIR || tmpdir() : join(home, 'tmp');
    const identity = this.mode === 'uid_per_execution' ? this.acquire(executionId) : null;
    const fds: number[] = [];
    let rootFd: number | null = null;
    try {
      // Before anything of the uid runs: its loopback is filtered from its first packet (ADR 0057).
      if (identity) await this.network?.restrict(identity.uid);
      // The work root is the operator's (configured, trusted): made by path if missing, as at start-up.
      mkdirSync(this.workRoot, { recursive: true, mode: 0o711 });
      rootFd = await openRoot(this.workRoot);
      // Missing levels are made root's, 0711 (agents pass through, list nothing); the last one
      // 0700 (its owner is set by the chown that follows).
      const dirs = sharedHome ? [cwd] : [cwd, home];
      for (const dir of dirs) {
        const parts = relative(this.workRoot, dir).split(sep);
        fds.push(await openPathAt(rootFd, parts, (i) => (i === parts.length - 1 ? 0o700 : 0o711)));
      }
      // TMPDIR, inside the home (chowned with it below). A symbolic link an agent put there is its
      // own business (it follows it with its own uid's rights; the walk does not): left alone.
      if (!sharedHome)
        await openDirAt(fds[1]!, 'tmp', 0o700).then(closeFd, (e: unknown) => {
          if (!(e instanceof RefusedPath)) throw e;
        });
      if (settings) await writeSettings(fds[1]!, settings);
      if (identity) {
        // A new execution of the task takes its directories over: a resume edits what the last
        // execution left (ADR 0017). By descriptor: ADR 0056.
        const isAgentUid = (u: number) => u >= this.range.first && u <= this.range.last;
        await chownTreeAt(fds[0]!, identity, isAgentUid);
        await chownTreeAt(fds[1]!, identity, isAgentUid);
      }
    } catch (e) {
      if (identity) {
        await this.network?.release(identity.uid);
        this.held.delete(identity.uid);
        this.unlock(identity.uid);
      }
      if (e instanceof RefusedPath)
        throw validationError(`working_dir must be reached without a symbolic link: ${e.message}`, { working_dir: workingDir ?? cwd });
      throw unavailable(`cannot prepare the agent's directories: ${(e as Error).message}`, { execution_id: executionId });
    } finally {
      for (const fd of fds) await closeFd(fd);
      if (rootFd !== null) await closeFd(rootFd);
    }
    return { executionId, identity, cwd, home, tmp };
  }

  /**
   * After the teardown: every process still holding the execution's uid (a grandchild that ignored
   * SIGTERM and outlived agentctl) is SIGKILLed; the directories go back to root (0700), so a later
   * execution that gets this uid reaches none of them; then the uid is free, though the allocator
   * still skips it while /proc shows any process with it.
   */
  async finish(p: Placement): Promise<{ survivors: readonly number[] }> {
    if (!p.identity) return { survivors: [] };
    const { uid } = p.identity;
    let survivors = await this.uidScan.pidsOf(uid);
    const until = performance.now() + UID_SWEEP_MS;
    while (survivors.length > 0) {
      for (const pid of survivors) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone meanwhile
        }
      }
      if (performance.now() > until) break;
      // The next pass comes after the scan's spacing: the wait between two SIGKILLs.
      survivors = await this.uidScan.pidsOf(uid);
    }
    if (survivors.length > 0)
      this.log.error(
        { uid, pids: survivors, execution_id: p.executionId },
        "processes of a finished execution's uid survive SIGKILL; the uid stays out of use while they live",
      );
    for (const dir of [p.cwd, p.home]) {
      try {
        // Only if it is still ours: a later execution of the same task may have taken it over. By
        // descriptor (ADR 0056): a symbolic link swapped in on the way is refused, not followed.
        await this.handBack(dir, uid);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== 'ENOENT' && !(e instanceof RefusedPath)) this.log.warn({ err: e, dir }, "cannot hand a finished execution's directory back to root");
      }
    }
    if (this.held.get(uid) === p.executionId) {
      // The loopback filter is lifted only once no process of the uid is left (a survivor keeps it),
      // and before the uid is free: a late lift would open a new holder's filter. Awaited, so an
      // execution's stopped event still means its uid is free again (nft runs are batched, one at
      // a time: agent-network.ts).
      if (survivors.length === 0)
        await this.network?.release(uid).catch((e: unknown) => this.log.warn({ err: e, uid }, "cannot lift a finished execution's loopback filter"));
      this.held.delete(uid);
      this.unlock(uid);
    }
    return { survivors };
  }

  /**
   * Start-up: a previous run of this instance held `uid`, and its leftovers are swept by
   * it only once this instance holds the uid's lock again. That run's lock went stale when it died,
   * so another instance of this host (a replica, another stack) may have taken the uid for an
   * execution of its own since: then its processes are not ours, and this returns false. Held like
   * an execution's uid (the lock for other processes, `held` for instances in this one) until
   * `releaseLeftoverUid` after the sweep.
   */
  claimLeftoverUid(uid: number): boolean {
    if (this.held.has(uid) || !this.lock(uid)) return false;
    this.held.set(uid, LEFTOVER_SWEEP);
    return true;
  }

  releaseLeftoverUid(uid: number): void {
    if (this.held.get(uid) !== LEFTOVER_SWEEP) return;
    this.held.delete(uid);
    this.unlock(uid);
  }

  private acquire(executionId: string): AgentIdentity {
    const live = liveUids();
    const lost = new Set<number>();
    for (;;) {
      const uid = pickFreeUid(this.range, (u) => this.held.has(u) || live.has(u) || lost.has(u) || this.lockedElsewhere(u), this.cursor);
      if (uid === null) throw unavailable(`no free agent uid in AGENT_UID_RANGE ${this.range.first}-${this.range.last}`, { execution_id: executionId });
      // Another lifecycle instance on this host (npm start with replicas) may pick the same uid
      // before either has spawned: the lock file decides.
      if (!this.lock(uid)) {
        lost.add(uid);
        continue;
      }
      this.held.set(uid, executionId);
      this.cursor = uid === this.range.last ? this.range.first : uid + 1;
      return { uid, gid: uid };
    }
  }

  /*
   * `<lock dir>/<uid>`: which process holds a uid, for lifecycle instances that share a host. Held
   * from before the spawn to the end of the teardown, like `held`; a lock whose process is gone (a
   * crash) is stale and taken over. Without it, an instance whose agent had just exited (its uid
   * shows no process) could hand the uid to a new agent while the other instance's teardown was
   * about to sweep that uid with SIGKILL.
   */

  private lockedElsewhere(uid: number): boolean {
    let owner: number;
    try {
      owner = Number(readFileSync(join(this.lockDir, String(uid)), 'utf8'));
    } catch {
      return false;
    }
    if (owner === process.pid) return false;
    return Number.isInteger(owner) && owner > 0 && processExists(owner);
  }

  private lock(uid: number): boolean {
    const path = join(this.lockDir, String(uid));
    mkdirSync(this.lockDir, { recursive: true, mode: 0o700 });
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        const fd = openSync(path, 'wx', 0o600);
        writeSync(fd, String(process.pid));
        closeSync(fd);
        return true;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        if (this.lockedElsewhere(uid)) return false;
        // Stale (its process is gone) or ours from a run that crashed: take it over.
        rmSync(path, { force: true });
      }
    }
    return false;
  }

  private unlock(uid: number): void {
    rmSync(join(this.lockDir, String(uid)), { force: true });
  }

  private async handBack(dir: string, uid: number): Promise<void> {
    const rootFd = await openRoot(this.workRoot);
    try {
      const fd = await openPathAt(rootFd, relative(this.workRoot, dir).split(sep));
      try {
        await chownIfOwnedBy(fd, uid, { uid: 0, gid: 0 });
      } finally {
        await closeFd(fd);
      }
    } finally {
      await closeFd(rootFd);
    }
  }
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}
