import { lowerAutogroupPriority, makeCpuGroup, ownCpuCgroup } from '@kandev/runtime/host';
import type { Logger } from '@kandev/runtime';
import { write } from 'node:fs';

/*
 * Where a stopping execution's processes go, so that together they weigh no more than one process of
 * the control plane (ADR 0046).
 *
 * The scheduler shares the CPU between groups first: on a host with autogroups every session is a
 * group, and each of a tree pause's hundred stopping agentctls and agents was one (ADR 0043). At
 * AGENT_NICE each group weighed a tenth of the gateway's, but two hundred of them together weighed
 * twenty times as much, and the operator's reads waited for seconds behind the exits. One cgroup for
 * every stopping process of the host, at the default weight, takes as much of the CPU as one
 * control-plane process when both want it, however many executions end at once, and all of it
 * when the control plane is idle. (Weighted as one process at AGENT_NICE instead, the reads were
 * no faster and the teardowns slower: ADR 0046.)
 *
 * The group is a child of this process's own cpu cgroup (v1 `cpu` controller, or v2 where the cpu
 * controller can be enabled for children), shared by every lifecycle instance of the host and
 * kept after exit (an empty cgroup holds nothing); the host module finds and makes it
 * (@kandev/runtime/host, cgroup.ts). Where none can be made (a read-only
 * /sys/fs/cgroup, as in most containers), the stopping sessions' autogroups are lowered instead, as
 * ADR 0043 had it: that ranks each session against the control plane, not all of them together.
 */

export type StoppingCpuMode = 'cgroup' | 'autogroup' | 'off';

export const STOPPING_GROUP = 'kandev-stopping';

export class StoppingCpu {
  private constructor(
    readonly mode: StoppingCpuMode,
    /**
     * The group's cgroup.procs, open for this process's life, in `cgroup` mode: each write(2) of a
     * pid moves that process. An open, write and close per move (fs/promises writeFile) cost a
     * hundred-execution teardown about a tenth of a second of this service's main thread. Node
     * opens it close-on-exec, as every file it opens: no agentctl or agent inherits a handle that
     * could move processes between cgroups.
     */
    private readonly procsFd: number | null,
    private readonly nice: number,
    private readonly log: Logger,
  ) {}

  /** Finds or makes the host's stopping group (unless `group` is 'off'); `nice` 0 (AGENT_NICE=0) ranks nothing. */
  static open(opts: { nice: number; group?: 'auto' | 'off'; log: Logger; procSelf?: string }): StoppingCpu {
    const { nice, log } = opts;
    if (nice <= 0) return new StoppingCpu('off', null, 0, log);
    const procSelf = opts.procSelf ?? '/proc/self';
    const group = opts.group === 'off' ? { reason: 'STOPPING_CPU_GROUP=off' } : makeGroup(procSelf);
    if ('dir' in group) {
      log.info({ stopping_cpu_group: group.dir }, 'stopping executions share one cpu cgroup');
      return new StoppingCpu('cgroup', group.procsFd, nice, log);
    }
    log.info({ reason: group.reason }, 'no cpu cgroup for stopping executions; their sessions are lowered one by one (autogroups)');
    return new StoppingCpu('autogroup', null, nice, log);
  }

  /** Ranks these processes (a stopping execution's agentctl and agent tree) below the control plane. Never waits, never throws. */
  lower(pids: readonly number[]): void {
    for (const pid of pids) {
      if (this.mode === 'autogroup') void lowerAutogroupPriority(pid, this.nice);
      else if (this.procsFd !== null) this.move(pid, this.procsFd);
    }
  }

  /** On libuv's thread pool: moving a process takes the kernel's cgroup lock, which may wait. */
  private move(pid: number, fd: number): void {
    write(fd, String(pid), (err) => {
      // ESRCH: gone already, nothing to rank. Anything else leaves it where it was, at AGENT_NICE within its session.
      if (err && err.code !== 'ESRCH') this.log.warn({ pid, code: err.code }, 'could not move a stopping process into the stopping cpu group');
    });
  }
}

/** The group's directory, made and weighted, and its cgroup.procs opened; or why there is none. */
function makeGroup(procSelf: string): { dir: string; procsFd: number } | { reason: string } {
  const parent = ownCpuCgroup(procSelf);
  return 'reason' in parent ? parent : makeCpuGroup(parent, STOPPING_GROUP);
}
