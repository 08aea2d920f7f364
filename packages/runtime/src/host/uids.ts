import { readFileSync } from 'node:fs';
import { statusIsZombie, statusUids } from './parse.js';
import { listPids } from './process-tree.js';

/*
 * Which uids processes hold, from /proc/<pid>/status: what the
 * lifecycle's uid allocator and its final sweeps read (ADR 0017). A process that exits between the
 * listing and the read is simply skipped.
 */

function statusOf(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
}

/**
 * Every live process's pid under each uid it holds (real, effective, saved or filesystem), from one
 * pass over /proc; zombies do not count (they run nothing, hold no file and cannot be signalled).
 */
export function pidsByUid(): Map<number, number[]> {
  const byUid = new Map<number, number[]>();
  for (const pid of listPids()) {
    const s = statusOf(pid);
    if (!s || statusIsZombie(s)) continue;
    for (const uid of new Set(statusUids(s))) {
      const list = byUid.get(uid);
      if (list) list.push(pid);
      else byUid.set(uid, [pid]);
    }
  }
  return byUid;
}

/** Every uid some live process holds now. */
export const liveUids = (): Set<number> => new Set(pidsByUid().keys());
