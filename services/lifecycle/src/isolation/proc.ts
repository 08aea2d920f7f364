import { readdirSync, readFileSync } from 'node:fs';
import { parseCapEff, uidsOfStatus } from '../domain/agent-uids.js';

/*
 * The thin /proc reader behind the uid allocator: which uids processes hold, and which processes
 * hold a given uid. A process that exits between the listing and the read is simply skipped.
 */

function statusOf(pid: string): string | null {
  try {
    return readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
}

/** A zombie has exited: it runs nothing, holds no file and cannot be signalled; only its parent's wait() removes it. */
const isZombie = (status: string): boolean => /^State:\s*Z/m.test(status);

function pids(): string[] {
  try {
    return readdirSync('/proc').filter((n) => /^\d+$/.test(n));
  } catch {
    return [];
  }
}

/**
 * Every live process's pid under each uid it holds (real, effective, saved or filesystem), from one
 * pass over /proc; zombies do not count.
 */
export function pidsByUid(): Map<number, number[]> {
  const byUid = new Map<number, number[]>();
  for (const pid of pids()) {
    const s = statusOf(pid);
    if (!s || isZombie(s)) continue;
    for (const uid of new Set(uidsOfStatus(s))) {
      const list = byUid.get(uid);
      if (list) list.push(Number(pid));
      else byUid.set(uid, [Number(pid)]);
    }
  }
  return byUid;
}

/** Every uid some live process holds now. */
export const liveUids = (): Set<number> => new Set(pidsByUid().keys());

/** This process's effective capabilities; null where there is no /proc. */
export function ownCapEff(): bigint | null {
  const s = statusOf('self');
  return s ? parseCapEff(s) : null;
}
