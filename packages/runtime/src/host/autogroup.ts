import { writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Where the kernel groups tasks by session (CONFIG_SCHED_AUTOGROUP, on by default in most
 * distributions: /proc/sys/kernel/sched_autogroup_enabled), every session (setsid) is an
 * "autogroup" of its own, and the CPU is shared fairly between autogroups before a task's nice
 * value counts, inside its own group only (sched(7), "The autogroup feature"). agentctl and its
 * agent are each spawned detached, so each leads a session: a nice value on them alone ranked them
 * against nothing, and a hundred agentctls tearing down at nice 19 still took a hundred shares of
 * the CPU against the gateway's one (ADR 0043). The autogroup's own nice, written to
 * /proc/<pid>/autogroup, is what ranks a session against the control plane's. The lifecycle sets
 * it for an execution's two sessions once the execution is being stopped.
 *
 * The kernel lets only CAP_SYS_ADMIN write it more often than once per 100 ms on the whole host
 * (EAGAIN otherwise): a caller without it retries, spaced, up to `attempts` times. Raising a nice
 * value needs no privilege; nothing here ever lowers one.
 */
export type AutogroupOutcome = 'set' | 'unsupported' | 'gone' | 'refused' | 'busy';

const RETRY_SPACING_MS = 110;

export async function lowerAutogroupPriority(pid: number, nice: number, attempts = 30): Promise<AutogroupOutcome> {
  const value = String(Math.min(19, Math.max(0, Math.trunc(nice))));
  for (let attempt = 1; ; attempt++) {
    try {
      await writeFile(`/proc/${pid}/autogroup`, value);
      return 'set';
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      // Rate-limited by the kernel (another session's write within the last 100 ms).
      if (code === 'EAGAIN' && attempt < attempts) {
        await sleep(RETRY_SPACING_MS + Math.floor(Math.random() * 50));
        continue;
      }
      if (code === 'EAGAIN') return 'busy';
      // No such file: a kernel without autogroups (nothing to rank), or the process is gone.
      if (code === 'ENOENT') return 'unsupported';
      if (code === 'ESRCH') return 'gone';
      return 'refused';
    }
  }
}
