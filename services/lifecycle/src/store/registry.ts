import { Buckets, Execution } from '@kandev/contracts';
import type { Logger, NatsConnection } from '@kandev/runtime';
import { Kvm, type KV } from '@nats-io/kv';

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * The execution registry: NATS KV bucket, one key per execution id, value = Execution. Every
 * value is validated when written and when read. The bucket's max age is the liveness TTL: the
 * owner re-puts its entries every TTL/3, so the entries of a dead instance vanish on their own.
 */
export class ExecutionRegistry {
  private constructor(
    private readonly kv: KV,
    private readonly log: Logger,
  ) {}

  static async open(nc: NatsConnection, ttlMs: number, log: Logger): Promise<ExecutionRegistry> {
    const kv = await new Kvm(nc).create(Buckets.executions, { history: 1, ttl: ttlMs });
    const status = await kv.status();
    // The first instance creates the bucket; later ones get its TTL. A mismatch means replicas were
    // configured differently, and entries of the one with the longer refresh period could lapse.
    if (status.ttl !== ttlMs) log.warn({ bucket_ttl_ms: status.ttl, configured_ttl_ms: ttlMs }, 'registry bucket has a different TTL than REGISTRY_TTL_MS');
    return new ExecutionRegistry(kv, log);
  }

  async put(e: Execution): Promise<void> {
    const checked = Execution.parse(e);
    await this.kv.put(checked.execution_id, enc.encode(JSON.stringify(checked)));
  }

  async get(executionId: string): Promise<Execution | null> {
    const entry = await this.kv.get(executionId);
    if (!entry || entry.operation !== 'PUT' || entry.value.length === 0) return null;
    return this.decode(executionId, entry.value);
  }

  async delete(executionId: string): Promise<void> {
    await this.kv.delete(executionId);
  }

  /** Every live entry; a bucket of executions is small (one key per running agent). */
  async all(): Promise<Execution[]> {
    const keys: string[] = [];
    for await (const k of await this.kv.keys()) keys.push(k);
    const values = await Promise.all(keys.map((k) => this.get(k).catch(() => null)));
    return values.filter((v): v is Execution => v !== null);
  }

  async listForTask(taskId: string): Promise<Execution[]> {
    return (await this.all()).filter((e) => e.task_id === taskId).sort((a, b) => a.started_at.localeCompare(b.started_at));
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
