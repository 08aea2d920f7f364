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

/** Every uid some live process holds now (real, effective, saved or filesystem); zombies do not count. */
export function liveUids(): Set<number> {
  const uids = new Set<number>();
  for (const pid of pids()) {
    const s = statusOf(pid);
    if (s && !isZombie(s)) for (const u of uidsOfStatus(s)) uids.add(u);
  }
  return uids;
}

/** The pids of every process that holds `uid` in any of its uid fields. */
export function pidsOfUid(uid: number): number[] {
  const out: number[] = [];
  for (const pid of pids()) {
    const s = statusOf(pid);
    if (s && !isZombie(s) && uidsOfStatus(s).includes(uid)) out.push(Number(pid));
  }
  return out;
}

/** This process's effective capabilities; null where there is no /proc. */
export function ownCapEff(): bigint | null {
  const s = statusOf('self');
  return s ? parseCapEff(s) : null;
}
