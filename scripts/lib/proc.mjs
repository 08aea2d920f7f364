// Process-tree bookkeeping, so `npm start` can prove it left nothing behind: a process is
// identified by (pid, start time), which survives pid reuse. The /proc reading is the host
// module's (@kandev/runtime/host); this script runs after the build.
import { hasEnded, listPids, readProcStat } from '@kandev/runtime/host';
/**
 * @typedef {{ pid: number, start: string }} Proc a process as recorded: pid and start time (clock ticks after boot)
 * @typedef {{ pid: number, state: string, ppid: number, start: string }} Stat
 */

/**
 * `{pid, ppid, state, start}` of a live (or zombie) process, or null when it is gone.
 * @param {number} pid
 * @returns {Stat | null}
 */
export function readStat(pid) {
  const st = readProcStat(pid);
  return st ? { pid, state: st.state, ppid: st.ppid, start: st.startTime } : null;
}

/**
 * Every process whose parent chain leads to `rootPid` (not the root itself).
 * @param {number} rootPid
 * @returns {Proc[]}
 */
export function descendants(rootPid) {
  const byParent = /** @type {Map<number, Stat[]>} */ (new Map());
  for (const pid of listPids()) {
    const st = readStat(pid);
    if (!st) continue;
    const list = byParent.get(st.ppid) ?? [];
    list.push(st);
    byParent.set(st.ppid, list);
  }
  const out = /** @type {Proc[]} */ ([]);
  const queue = [rootPid];
  while (queue.length) {
    const p = /** @type {number} */ (queue.shift());
    for (const c of byParent.get(p) ?? []) {
      out.push({ pid: c.pid, start: c.start });
      queue.push(c.pid);
    }
  }
  return out;
}

/**
 * True while the very process recorded in `proc` runs (a zombie counts as gone).
 * @param {Proc} proc
 */
export function isAlive(proc) {
  const st = readStat(proc.pid);
  return st !== null && st.start === proc.start && !hasEnded(st.state);
}

/** @param {number} ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Make sure every recorded process is gone: SIGTERM the survivors, wait up to `graceMs`, then
 * SIGKILL. Returns the pids that had to be signalled.
 * @param {Proc[]} procs
 * @returns {Promise<number[]>}
 */
export async function reap(procs, graceMs = 2_000) {
  const survivors = procs.filter(isAlive);
  if (survivors.length === 0) return [];
  for (const p of survivors) signal(p, 'SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && survivors.some(isAlive)) await sleep(50);
  for (const p of survivors.filter(isAlive)) signal(p, 'SIGKILL');
  const killDeadline = Date.now() + 2_000;
  while (Date.now() < killDeadline && survivors.some(isAlive)) await sleep(20);
  return survivors.map((p) => p.pid);
}

/**
 * @param {Proc} proc
 * @param {NodeJS.Signals} sig
 */
function signal(proc, sig) {
  if (!isAlive(proc)) return;
  try {
    process.kill(proc.pid, sig);
  } catch {
    /* already gone */
  }
}
