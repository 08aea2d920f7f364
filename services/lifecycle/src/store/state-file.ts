import { chownSync, closeSync, mkdirSync, openSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { z } from 'zod';

/*
 * `${KANDEV_STATE_DIR}/lifecycle/${instanceId}.json`: the processes this instance is responsible
 * for, with their start times, so a restart with the same instance id can kill exactly the
 * processes its previous run left behind, and never a process that merely reuses one of the pids
 * . Written atomically (temp file + rename) at once after an entry is added; removals are
 * gathered for REMOVAL_FLUSH_MS and written together. Each write is the whole file, and the
 * executions a tree pause ends finish over a few seconds: one rewrite per removal, each of every
 * entry left, cost the lifecycle's loop in proportion to the square of the live count. A removal
 * not yet written is harmless: the entry names a process that has exited (a restart finds it gone),
 * and an added entry writes every removal before it.
 */

/** How long removals are gathered before the file is rewritten without them. */
const REMOVAL_FLUSH_MS = 100;

const Proc = z.object({ pid: z.number().int().positive(), start_time: z.string().nullable() });
export const StateEntry = z.object({
  execution_id: z.string(),
  workspace_id: z.string(),
  task_id: z.string(),
  session_id: z.string(),
  agentctl: Proc,
  agent: Proc.nullable(),
  /** The execution's own uid; start-up cleanup kills every process left with it. */
  uid: z.number().int().positive().nullable().optional(),
});
export type StateEntry = z.infer<typeof StateEntry>;
const StateFileBody = z.object({ instance_id: z.string(), executions: z.array(StateEntry) });

export class StateFile {
  readonly path: string;
  private readonly entries = new Map<string, StateEntry>();
  private removalFlush: NodeJS.Timeout | undefined;

  constructor(
    stateDir: string,
    private readonly instanceId: string,
  ) {
    this.path = join(stateDir, 'lifecycle', `${instanceId}.json`);
  }

  /**
   * Where the agentctl of an execution logs once this instance is gone (its stderr pipe went with
   * it): `${KANDEV_STATE_DIR}/agentctl-logs/${instanceId}/<execution_id>.log`. The next run with
   * this instance id relays and removes these files (startup-cleanup.ts). Outside
   * `lifecycle/` (0700): agentctl may run under an agent uid, which passes through this directory
   * (0711) to its own file, which this service creates for it, owned by that uid, mode 0600.
   */
  agentctlLogPath(executionId: string): string {
    return join(this.agentctlLogDir, `${executionId}.log`);
  }

  get agentctlLogDir(): string {
    return join(dirname(dirname(this.path)), 'agentctl-logs', this.instanceId);
  }

  /** Creates an execution's agentctl log file for `owner` (the execution's uid, when it has one). */
  createAgentctlLog(executionId: string, owner: { uid: number; gid: number } | null): string {
    const dir = this.agentctlLogDir;
    mkdirSync(dir, { recursive: true, mode: 0o711 });
    const path = this.agentctlLogPath(executionId);
    closeSync(openSync(path, 'a', 0o600));
    if (owner) chownSync(path, owner.uid, owner.gid);
    return path;
  }

  /** What a previous run recorded; a missing or unreadable file means nothing was left. */
  readLeftovers(): { entries: StateEntry[]; problem: string | null } {
    let raw: string;
    try {
      raw = readFileSync(this.path, 'utf8');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { entries: [], problem: null };
      return { entries: [], problem: (e as Error).message };
    }
    const parsed = StateFileBody.safeParse(safeJson(raw));
    if (!parsed.success) return { entries: [], problem: 'state file is malformed' };
    return { entries: parsed.data.executions, problem: null };
  }

  set(entry: StateEntry): void {
    this.entries.set(entry.execution_id, entry);
    this.flush();
  }

  remove(executionId: string): void {
    if (!this.entries.delete(executionId) || this.removalFlush) return;
    this.removalFlush = setTimeout(() => this.flush(), REMOVAL_FLUSH_MS);
  }

  /** Rewrite the file with what is live now (start-up writes it empty after cleanup, shutdown at the end); removals waiting go with it. */
  flush(): void {
    clearTimeout(this.removalFlush);
    this.removalFlush = undefined;
    mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 });
    const tmp = `${this.path}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify({ instance_id: this.instanceId, executions: [...this.entries.values()] }, null, 2));
    renameSync(tmp, this.path);
  }
}

function safeJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return null;
  }
}
