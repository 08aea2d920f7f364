import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { SpanStatusCode, trace } from '@opentelemetry/api';
import type { AdapterOptions } from './adapters/adapter.js';
import type { AgentSpec } from './catalogue.js';
import type { Logger } from './log.js';
import {
  HAS_PROC,
  isAlive,
  mergeTrees,
  niceBelowOwn,
  processesInGroups,
  processTree,
  readProcStat,
  signalProcesses,
  terminate,
  yieldPriorityTo,
  type ProcessRef,
  type TreeProcess,
} from '@kandev/runtime/host';

export interface AgentExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Termination {
  /** `graceful`: gone before SIGKILL was needed; `killed`: it outlived the grace period. */
  how: 'graceful' | 'killed';
  exit: AgentExit;
}

const tracer = trace.getTracer('@kandev/agentctl');

/**
 * How often the agent's process tree is noted while it runs (@kandev/runtime/host, process-tree.ts): every
 * TREE_REFRESH_MS while it changes; each look that finds it as it was doubles the wait, up to
 * TREE_REFRESH_MAX_MS, and a change brings it back to TREE_REFRESH_MS. An agent waiting on its
 * model or its operator has a tree that does not change, and a hundred of them looking every
 * second cost the machine a share of a core for nothing (ADR 0027).
 */
export const TREE_REFRESH_MS = 1_000;
export const TREE_REFRESH_MAX_MS = 8_000;

/** The wait before the next look at the tree, after one that found it `changed` or not. */
export function nextTreeRefreshMs(previousMs: number, changed: boolean): number {
  return changed ? TREE_REFRESH_MS : Math.min(TREE_REFRESH_MAX_MS, previousMs * 2);
}
/** agentctl's own process group: never one of the agent's (it runs detached), never signalled. */
const OWN_GROUP = readProcStat(process.pid)?.pgid ?? process.pid;
/** How long agentctl keeps re-sending SIGKILL to survivors of the tree before it reports them and gives up. */
const SWEEP_LIMIT_MS = 5_000;

/**
 * The agent's OS process: stdio pipes for the protocol, stderr re-logged as JSON, and the
 * SIGTERM → grace → SIGKILL teardown. The agent runs in a process group of its own, and a stop
 * signals every group and process of its tree: a shell command or MCP server the agent started
 * does not outlive it. agentctl is the only thing that signals it.
 */
export class AgentProcess {
  readonly pid: number;
  readonly exited: Promise<AgentExit>;
  private exit: AgentExit | undefined;
  /** Every process of the agent's tree seen so far; a child re-parented away stays on it. */
  private tree: TreeProcess[] = [];
  /** The process groups the tree has had, kept while they may hold a live member (see findStrays). */
  private readonly groups = new Set<number>();
  private treeTimer: NodeJS.Timeout | undefined;
  private treeRefreshMs = TREE_REFRESH_MS;

  private constructor(
    readonly child: ChildProcessWithoutNullStreams,
    private readonly log: Logger,
  ) {
    if (child.pid === undefined) throw new Error('agent process has no pid');
    this.pid = child.pid;
    this.noteTree();
    this.scheduleTreeRefresh();
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        clearTimeout(this.treeTimer);
        this.treeTimer = undefined;
        this.exit = { code, signal };
        log.info({ agent_pid: this.pid, code, signal }, 'agent exited');
        resolve(this.exit);
      });
    });
    const lines = createInterface({ input: child.stderr, crlfDelay: Infinity });
    lines.on('line', (line) => log.info({ agent_pid: this.pid, line }, 'agent stderr'));
    // A protocol write after the agent died must surface as a failed call, not an uncaught EPIPE.
    child.stdin.on('error', (err) => log.warn({ err: err.message }, 'agent stdin error'));
  }

  /** Spawns the agent; rejects when the command cannot be started at all (ENOENT, EACCES). */
  static start(spec: AgentSpec, opts: Pick<AdapterOptions, 'cwd' | 'env' | 'agentNice'>, log: Logger): Promise<AgentProcess> {
    return new Promise((resolve, reject) => {
      // detached: the agent leads a new process group, so its tree can be signalled as one.
      const child = spawn(spec.command, spec.args, { cwd: opts.cwd, env: { ...opts.env, ...spec.env }, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      child.once('error', (err) => reject(new Error(`cannot start agent "${spec.name}" (${spec.command}): ${err.message}`)));
      child.once('spawn', () => {
        if (opts.agentNice > 0 && child.pid !== undefined) lowerPriority(child.pid, opts.agentNice, log);
        try {
          resolve(new AgentProcess(child, log));
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
    });
  }

  get alive(): boolean {
    return this.exit === undefined;
  }

  get exitInfo(): AgentExit | undefined {
    return this.exit;
  }

  /**
   * SIGTERM to every group and process of the agent's tree, the grace period, then SIGKILL to
   * whatever is left (@kandev/runtime/host, terminate.ts). Processes of the tree that outlive the agent are SIGKILLed too
   * (they had the same grace). Also sweeps the tree of an agent that already exited on its own.
   * `killed` only when the agent itself outlived the grace.
   */
  async terminate(graceMs: number): Promise<Termination> {
    return tracer.startActiveSpan(
      'agent.terminate',
      { attributes: { 'process.pid': this.pid, 'kandev.grace_ms': graceMs } },
      async (span): Promise<Termination> => {
        try {
          const r = await terminate(() => this.targets(), {
            graceMs,
            exits: [this.exited],
            killWindowMs: SWEEP_LIMIT_MS,
            onSignal: (signal, pids, round) => {
              if (round === 0) this.log.info({ agent_pid: this.pid, signal, processes: pids.length }, 'signalling agent tree');
              else if (round === 1) this.log.warn({ agent_pid: this.pid, grace_ms: graceMs, pids }, 'agent tree outlived its grace period; killing');
              else this.log.warn({ agent_pid: this.pid, pids, round }, 'processes of the agent tree survive SIGKILL; retrying');
            },
          });
          if (r.survivors.length > 0)
            this.log.error({ agent_pid: this.pid, pids: r.survivors.map((p) => p.pid) }, 'processes of the agent tree survive SIGKILL');
          const how: Termination['how'] = r.killed.some((p) => p.pid === this.pid) ? 'killed' : 'graceful';
          return { how, exit: await this.exited };
        } catch (err) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
          throw err;
        } finally {
          span.end();
        }
      },
    );
  }

  /** SIGKILL to the whole tree at once, synchronously: the last word of an agentctl that is crashing. */
  killTree(): void {
    signalProcesses(this.targets(), 'SIGKILL');
  }

  /** Processes of the agent's tree still running (the agent itself included). */
  survivors(): TreeProcess[] {
    return this.tree.filter(isAlive);
  }

  /**
   * What a stop must end, live now: the tree as noted (see noteTree), or without /proc (no tree to
   * see) the agent itself. terminate() takes an empty answer as the end of the stop, and this never
   * gives one before it has looked into every group the tree has had.
   */
  private targets(): ProcessRef[] {
    this.noteTree();
    if (this.tree.length > 0 || HAS_PROC) return this.tree;
    const agent = { pid: this.pid, startTime: null };
    return isAlive(agent) ? [agent] : [];
  }

  /** The periodic look at the tree while the agent runs, backing off while the tree stays as it is. */
  private scheduleTreeRefresh(): void {
    this.treeTimer = setTimeout(() => {
      if (this.exit !== undefined) return;
      const before = treeKey(this.tree);
      this.noteTree();
      this.treeRefreshMs = nextTreeRefreshMs(this.treeRefreshMs, treeKey(this.tree) !== before);
      this.scheduleTreeRefresh();
    }, this.treeRefreshMs).unref();
  }

  /**
   * Notes the live tree: what a walk from the agent finds, what a walk finds from each noted process
   * the agent's walk no longer reaches (re-parented away when its parent exited, or the agent itself
   * has exited: what it forks is still the agent's work), and the strays of the tree's groups.
   */
  private noteTree(): void {
    const found = processTree(this.pid);
    const reached = new Set(found.map((p) => p.pid));
    // The tree is noted parents first, so each subtree left behind is walked once, from its top.
    for (const p of this.tree) {
      if (reached.has(p.pid) || !isAlive(p)) continue;
      for (const q of processTree(p.pid)) {
        if (reached.has(q.pid)) continue;
        reached.add(q.pid);
        found.push(q);
      }
    }
    this.tree = found;
    for (const p of this.tree) if (p.pgid > 1 && p.pgid !== OWN_GROUP) this.groups.add(p.pgid);
    this.findStrays();
  }

  /**
   * Live members of the tree's process groups that no walk reaches: a shell wrapper that exits
   * (on SIGTERM, say) leaves a subshell it forked after the last walk re-parented to init, in the
   * wrapper's group (the shape of Gemini CLI's shell tool: a wrapper shell, then a subshell running
   * the command). A group with a live noted member needs no look: a signal to it reaches every
   * member. One without is asked whether it has members at all (a signal 0, no /proc scan), and
   * only then scanned. A group found with no live member is let go: no process can join it any
   * more, and its id, a pid, may be recycled from then on.
   */
  private findStrays(): void {
    const covered = new Set(this.tree.map((p) => p.pgid));
    // The agent leads its own group. Between its death and our reaping it (the child's exit
    // event) it is a zombie: its group still "has members" though no walk finds one, and each
    // look scanned every process on the machine, every POLL_MS of a stop's wait. A hundred
    // agentctls stopping at once spent most of their CPU there, and delayed the very reaping
    // that ends it (docs/fast-paths.md, "Tree holds with live sessions"). Until the exit event
    // that group is left alone: terminate() wakes on it, and the next look sees the group as it
    // is (empty, or with strays to scan for).
    if (this.exit === undefined && readProcStat(this.pid)?.state === 'Z') covered.add(this.pid);
    const unseen = new Set<number>();
    for (const g of this.groups) {
      if (covered.has(g)) continue;
      if (groupHasMembers(g)) unseen.add(g);
      else this.groups.delete(g);
    }
    if (unseen.size === 0) return;
    const found = processesInGroups(unseen);
    this.tree = mergeTrees(this.tree, found);
    const live = new Set(found.map((p) => p.pgid));
    for (const g of unseen) if (!live.has(g)) this.groups.delete(g);
  }
}

/** The tree as a comparable value: which processes (pid and start time) it holds. */
function treeKey(tree: readonly TreeProcess[]): string {
  return tree
    .map((p) => `${p.pid}:${p.startTime}`)
    .sort()
    .join(',');
}

/** Whether a process group has any member (a zombie counts); a group we may not signal counts too. */
function groupHasMembers(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Once its execution is being stopped, agentctl has nothing left that a caller waits on (no cancel
 * to relay, the stop is already answered upstream), and its teardown work goes to the agent's
 * priority: a tree pause ends a hundred executions at once, and a hundred agentctls at the control
 * plane's priority took the cores from the reads and decisions the operator waits for (ADR 0027).
 * Never raises it (not allowed unprivileged, and not wanted); a failure changes nothing. agentctl
 * and its agent each lead a session: the lifecycle lowers both sessions' autogroups as it asks for
 * the stop (flows/teardown.ts, ADR 0043), which is what ranks them against the control plane.
 */
export function yieldToControlPlane(agentPid: number): void {
  // False when the agent is gone already (no priority to read): nothing left to yield for.
  yieldPriorityTo(agentPid);
}

/**
 * The agent runs `increment` nice levels below agentctl (capped at 19). Set at once after the
 * spawn: what the agent starts afterwards (its tools, builds, tests) inherits it. Unprivileged
 * (lowering a priority needs no capability); a failure is logged and the agent runs as it is.
 */
function lowerPriority(pid: number, increment: number, log: Logger): void {
  try {
    niceBelowOwn(pid, increment);
  } catch (err) {
    log.warn({ agent_pid: pid, err: err instanceof Error ? err.message : String(err) }, "could not lower the agent's CPU priority");
  }
}
