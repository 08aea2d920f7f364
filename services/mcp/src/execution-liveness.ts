import { isLiveExecution, unauthorized, unavailable } from '@kandev/contracts';
import type { AgentClaims, RegistryReader } from '@kandev/runtime';

/**
 * SPEC: an agent token is valid only while its execution lives. Lifecycle mints one token per
 * execution with the execution id as a claim (`execution_id`); this check answers whether that
 * execution is still in the registry (NATS KV, written only by the lifecycle instance that runs
 * it, deleted when it ends, lapsing with its TTL when that instance dies) with a live status.
 *
 * Cost: one direct get by exact key (`<task_id>.<execution_id>`, RegistryReader.key) per token at
 * most every `cacheMs`; a positive answer is remembered that long, so a busy agent's calls cost
 * nothing more, and a token is refused at most `cacheMs` after its execution ended. Negative
 * answers are never remembered (nothing to gain: the token is refused either way).
 *
 * Tokens without `execution_id` are not bound to an execution: those are minted by hand
 * (`npm run token -- agent`), an operator's choice, and are valid until they expire
 * (docs/security.md). Lifecycle never mints one.
 */
export class ExecutionLiveness {
  private readonly live = new Map<string, number>();
  private readonly pending = new Map<string, Promise<boolean>>();

  constructor(
    private readonly registry: () => Promise<RegistryReader>,
    private readonly cacheMs: number,
    private readonly maxEntries = 10_000,
  ) {}

  /** Resolves when the token's execution lives (or it names none); UNAUTHORIZED when it ended, UNAVAILABLE when the registry cannot say. */
  async check(claims: AgentClaims): Promise<void> {
    if (!claims.execution_id) return;
    const key = `${claims.task_id}.${claims.execution_id}`;
    const until = this.live.get(key);
    if (until !== undefined && until > Date.now()) return;
    let lookup = this.pending.get(key);
    if (!lookup) {
      lookup = this.lookup(claims.task_id, claims.execution_id).finally(() => this.pending.delete(key));
      this.pending.set(key, lookup);
    }
    if (!(await lookup)) {
      this.live.delete(key);
      throw unauthorized('token of an execution that has ended');
    }
  }

  private async lookup(taskId: string, executionId: string): Promise<boolean> {
    let entry;
    try {
      // The key holds the task id: a token is never valid for an execution of another task.
      entry = await (await this.registry()).get(executionId, taskId);
    } catch (e) {
      throw unavailable('cannot check the execution of this token', { cause: e instanceof Error ? e.message : String(e) });
    }
    const live = entry !== null && entry.task_id === taskId && isLiveExecution(entry.status);
    if (live) {
      if (this.live.size >= this.maxEntries) this.live.delete(this.live.keys().next().value!);
      this.live.set(`${taskId}.${executionId}`, Date.now() + this.cacheMs);
    }
    return live;
  }
}
