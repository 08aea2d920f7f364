/*
 * Agents are untrusted (SPEC, ADR 0017): where this service may change uids, every execution's
 * agentctl and agent run under a uid (and a gid of the same number) of their own, taken from
 * AGENT_UID_RANGE. Pure rules here; the /proc reading is the host module's (@kandev/runtime/host).
 */
import { Cap, holdsCaps } from '@kandev/runtime/host';

export interface UidRange {
  first: number;
  last: number;
}

/** `"20000-29999"` → the range; a string says what is wrong. Below 1000 are system ids; above 2^31-2 is not a uid. */
export function parseUidRange(text: string): UidRange | string {
  const m = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(text);
  if (!m) return `AGENT_UID_RANGE must look like "20000-29999", got "${text}"`;
  const first = Number(m[1]);
  const last = Number(m[2]);
  if (first < 1000) return 'AGENT_UID_RANGE must start at 1000 or above (system and login ids live below)';
  if (last > 2 ** 31 - 2) return 'AGENT_UID_RANGE must end below 2147483647';
  if (last < first) return 'AGENT_UID_RANGE must not end before it starts';
  return { first, last };
}

/**
 * The next free uid of the range, searching from `cursor` and wrapping around once; null when every
 * uid is taken. A uid is taken while this instance holds it for an execution (from before the spawn
 * to the end of the teardown) and while any process has it as a real, effective, saved or filesystem
 * uid: an agent's grandchild that ignored SIGTERM and outlived agentctl keeps its uid from being
 * handed to another execution, which could then signal it or read what it reads. The search starts
 * after the last uid handed out, so a just-freed uid is the last to be reused.
 */
export function pickFreeUid(range: UidRange, taken: (uid: number) => boolean, cursor: number): number | null {
  const size = range.last - range.first + 1;
  const start = cursor < range.first || cursor > range.last ? range.first : cursor;
  for (let i = 0; i < size; i++) {
    const uid = range.first + ((start - range.first + i) % size);
    if (!taken(uid)) return uid;
  }
  return null;
}

export type AgentIsolationMode = 'uid_per_execution' | 'same_uid';

/** What an agent's process needs of this one's privileges: change uid and gid, chown its directories, signal it. */
const NEEDED = [Cap.SETUID, Cap.SETGID, Cap.CHOWN, Cap.KILL] as const;

/**
 * Whether agents get a uid of their own: when this process is root or holds the capabilities it
 * needs (a container that drops the rest, deploy/), unless turned off (AGENT_ISOLATION=off, for
 * debugging). Otherwise agents share this process's uid and that is said at start and in /readyz.
 */
export function isolationMode(probe: { euid: number | null; capEff: bigint | null }, setting: 'auto' | 'off'): { mode: AgentIsolationMode; why: string } {
  if (setting === 'off') return { mode: 'same_uid', why: 'AGENT_ISOLATION=off' };
  if (probe.euid === null) return { mode: 'same_uid', why: 'this platform has no uids' };
  const capable = holdsCaps(probe.capEff, NEEDED);
  if (capable) return { mode: 'uid_per_execution', why: probe.euid === 0 ? 'running as root' : 'holds CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_KILL' };
  // Root in a user namespace or with capabilities dropped has no CapEff bits: it cannot setuid either.
  return {
    mode: 'same_uid',
    why:
      probe.euid === 0
        ? 'root without CAP_SETUID/CAP_SETGID/CAP_CHOWN/CAP_KILL'
        : `not root (uid ${probe.euid}) and without CAP_SETUID/CAP_SETGID/CAP_CHOWN/CAP_KILL`,
  };
}
