import { Buckets, Execution } from '@kandev/contracts';
import type { Logger, NatsConnection } from '@kandev/runtime';
import { Kvm, type KV } from '@nats-io/kv';

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * The execution registry: NATS KV bucket, one key per execution, value = Execution. Every
 * value is validated when written and when read. The bucket's max age is the liveness TTL: the
 * owner re-puts its entries every TTL/3, so the entries of a dead instance vanish on their own.
 */
export class ExecutionRegistry {
  private constructor(
    private readonly kv: KV,
    private readonly log: Logger,
  ) {}

  static async open(nc: NatsConnection, ttlMs: number, log: Logger, replicas = 1): Promise<ExecutionRegistry> {
    const kv = await new Kvm(nc).create(Buckets.executions, { history: 1, ttl: ttlMs, replicas });
    const status = await kv.status();
    if (status.replicas !== replicas) log.warn({ bucket_replicas: status.replicas, configured_replicas: replicas }, 'registry bucket has a different replica count than KANDEV_JS_REPLICAS; left as is');
    // The first instance creates the bucket; later ones get its TTL. A mismatch means replicas were
    // configured differently, and entries of the one with the longer refresh period could lapse.
    if (status.ttl !== ttlMs) log.warn({ bucket_ttl_ms: status.ttl, configured_ttl_ms: ttlMs }, 'registry bucket has a different TTL than REGISTRY_TTL_MS');
    return new ExecutionRegistry(kv, log);
  }

  /**
   * Key = `<task_id>.<execution_id>`: listing a task's executions is a server-side subject filter
   * (`<task_id>.*`), not a scan of every running agent (a stop lists its task's registry on the
   * hot path, R-2.1).
   */
  private static key(taskId: string, executionId: string): string {
    return `${taskId}.${executionId}`;
  }

  async put(e: Execution): Promise<void> {
    const checked = Execution.parse(e);
    await this.kv.put(ExecutionRegistry.key(checked.task_id, checked.execution_id), enc.encode(JSON.stringify(checked)));
  }

  /** With `taskId` one exact-key read; without, a key search first (a consumer on the server: slower). */
  async get(executionId: string, taskId?: string): Promise<Execution | null> {
    const key = taskId ? ExecutionRegistry.key(taskId, executionId) : (await this.keys(`*.${executionId}`))[0];
    return key ? this.read(key) : null;
  }

  /** `taskId`, when the caller knows it, saves the key lookup. */
  async delete(executionId: string, taskId?: string): Promise<void> {
    const key = taskId ? ExecutionRegistry.key(taskId, executionId) : (await this.keys(`*.${executionId}`))[0];
    if (key) await this.kv.delete(key);
  }

  /** Every live entry (start-up cleanup; not on a request path). */
  async all(): Promise<Execution[]> {
    return this.readAll(await this.keys());
  }

  async listForTask(taskId: string): Promise<Execution[]> {
    return (await this.readAll(await this.keys(`${taskId}.*`))).sort((a, b) => a.started_at.localeCompare(b.started_at));
  }

  private async keys(filter?: string): Promise<string[]> {
    const keys: string[] = [];
    for await (const k of await this.kv.keys(filter)) keys.push(k);
    return keys;
  }

  /**
   * A key listed but unreadable is a failed read, not an absent execution: the whole list fails,
   * so a task stop answers INTERNAL_ERROR instead of NOT_FOUND or a stop that misses an agent. A
   * key deleted between listing and reading reads as null (gone), and a value that breaks the
   * contract is logged and skipped (see decode).
   */
  private async readAll(keys: string[]): Promise<Execution[]> {
    const values = await Promise.all(keys.map((k) => this.read(k)));
    return values.filter((v): v is Execution => v !== null);
  }

  private async read(key: string): Promise<Execution | null> {
    const entry = await this.kv.get(key);
    if (!entry || entry.operation !== 'PUT' || entry.value.length === 0) return null;
    return this.decode(key, entry.value);
  }

  private decode(key: string, raw: Uint8Array): Execution | null {
    try {
      return Execution.parse(JSON.parse(dec.decode(raw)));
    } catch (e) {
      this.log.error({ err: e, key }, 'registry entry breaks the Execution contract; ignored');
      return null;
    }
  }
}
