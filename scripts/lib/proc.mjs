// Process-tree bookkeeping, so `npm start` can prove it left nothing behind: a process is
// identified by (pid, start time), which survives pid reuse. The /proc reading is the host
// module's (@kandev/runtime/host); this script runs after the build.
import { hasEnded, listPids, readProcStat } from '@kandev/runtime/host';

/** `{pid, ppid, state, start}` of a live (or zombie) process, or null when it is gone. */
export function readStat(pid) {
  const st = readProcStat(pid);
  return st ? { pid, state: st.state, ppid: st.ppid, start: st.startTime } : null;
}

/** Every process whose parent chain leads to `rootPid` (not the root itself). */
export function descendants(rootPid) {
  const byParent = new Map();
  for (const pid of listPids()) {
    const st = readStat(pid);
    if (!st) continue;
    const list = byParent.get(st.ppid) ?? [];
    list.push(st);
    byParent.set(st.ppid, list);
  }
  const out = [];
  const queue = [rootPid];
  while (queue.length) {
    const p = queue.shift();
    for (const c of byParent.get(p) ?? []) {
      out.push({ pid: c.pid, start: c.start });
      queue.push(c.pid);
    }
  }
  return out;
}

/** True while the very process recorded in `proc` runs (a zombie counts as gone). */
export function isAlive(proc) {
  const st = readStat(proc.pid);
  return st !== null && st.start === proc.start && !hasEnded(st.state);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Make sure every recorded process is gone: SIGTERM the survivors, wait up to `graceMs`, then
 * SIGKILL. Returns the pids that had to be signalled.
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

function signal(proc, sig) {
  if (!isAlive(proc)) return;
  try {
    process.kill(proc.pid, sig);
  } catch {
    /* already gone */
  }
}
