import type { EventScope, Logger } from '@kandev/runtime';
import type { Execution } from '@kandev/contracts';
import type { AgentctlClient } from './agentctl/client.js';
import type { AgentctlProcess, ProcessExit } from './agentctl/process.js';
import type { TurnStep, TurnView } from './domain/turns.js';
import type { ProcessRef } from '@kandev/runtime/host';
import type { Placement } from './isolation/agent-isolation.js';
import type { ExecutionRegistry } from './store/registry.js';

/**
 * One execution this instance owns: its registry record, its processes, and two queues that keep
 * things in order: `writes` (registry puts/deletes, so a refresh never resurrects a deleted key)
 * and `lines` (agentctl events and cancel replies, so events are published in the order they
 * happened).
 */
export class LiveExecution {
  record: Execution;
  finishedTurns: readonly string[] = [];
  client: AgentctlClient | null = null;
  /** Its uid and directories; released by the teardown once every process of it is gone. */
  placement: Placement | null = null;
  /** agentctl's execution secret; never logged, never in the registry. */
  secret = '';
  agentRef: ProcessRef | null = null;
  /** Set by the `agent_exited` line: the agent is gone (by itself, or as the end of a stop). */
  agentExit: ProcessExit | null = null;
  /** Single-flight teardown: every stop, escalation or exit joins the first one. */
  teardown: Promise<void> | null = null;
  private removed = false;
  private pendingWrites = 0;
  /** performance.now() of the last put the server acknowledged; null before the first. */
  private lastPutAt: number | null = null;
  /**
   * Called after a put that came more than `ttlMs` after the previous acknowledged one: the entry
   * may have lapsed in between (this process was stalled, or NATS unreachable) and the orchestrator
   * may have declared the execution lost meanwhile. Set by the launch (flows/readmit.ts).
   */
  onLapse: ((gapMs: number) => void) | null = null;
  private writes: Promise<void> = Promise.resolve();
  private lines: Promise<void> = Promise.resolve();

  constructor(
    record: Execution,
    readonly agentctl: AgentctlProcess,
    readonly log: Logger,
    private readonly registry: ExecutionRegistry,
    private readonly ttlMs: number = Infinity,
  ) {
    this.record = record;
  }

  get id(): string {
    return this.record.execution_id;
  }

  get scope(): EventScope {
    return { workspace_id: this.record.workspace_id, task_id: this.record.task_id, session_id: this.record.session_id };
  }

  get turnView(): TurnView {
    return { status: this.record.status, turn_id: this.record.turn_id, finished: this.finishedTurns };
  }

  /** Apply a turn step; returns whether the registry record changed. */
  applyTurn(step: TurnStep): boolean {
    this.finishedTurns = step.view.finished;
    if (!step.changed) return false;
    this.update({ status: step.view.status, turn_id: step.view.turn_id });
    return true;
  }

  update(patch: Partial<Pick<Execution, 'status' | 'turn_id' | 'pid' | 'agentctl_url' | 'protocol'>>): void {
    this.record = { ...this.record, ...patch, updated_at: new Date().toISOString() };
  }

  /** Put the current record (as it is when the write runs). Never throws; failures are logged and the next refresh retries. */
  persist(): Promise<void> {
    this.pendingWrites++;
    this.writes = this.writes.then(async () => {
      try {
        if (this.removed) return;
        await this.registry.put(this.record);
        const now = performance.now();
        const gap = this.lastPutAt === null ? 0 : now - this.lastPutAt;
        this.lastPutAt = now;
        if (gap > this.ttlMs) this.onLapse?.(Math.round(gap));
      } catch (e) {
        this.log.warn({ err: e }, 'registry put failed; the next refresh retries');
      } finally {
        this.pendingWrites--;
      }
    });
    return this.writes;
  }

  /** Liveness refresh: a write already queued carries the latest record, so none piles up behind it (NATS down). */
  refresh(): void {
    if (this.pendingWrites === 0) void this.persist();
  }

  /** Delete the key after every queued put; later puts are dropped. */
  unregister(): Promise<void> {
    this.removed = true;
    this.writes = this.writes.then(async () => {
      for (let attempt = 0; attempt < 5; attempt++) {
        try {
          await this.registry.delete(this.id, this.record.task_id);
          return;
        } catch (e) {
          this.log.warn({ err: e, attempt }, 'registry delete failed; retrying');
          await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
        }
      }
      this.log.error('registry delete kept failing; the entry lapses with its TTL');
    });
    return this.writes;
  }

  /** Still in the registry (its entry is refreshed): false once the execution is removed. */
  get isRegistered(): boolean {
    return !this.removed;
  }

  /** Run fn after every earlier line; returns when fn is done. Errors are logged, never thrown. */
  inOrder(fn: () => Promise<void>): Promise<void> {
    this.lines = this.lines.then(fn).catch((e) => this.log.error({ err: e }, 'handling an agentctl event failed'));
    return this.lines;
  }
}
