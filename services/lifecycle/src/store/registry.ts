import { Buckets, Execution } from '@kandev/contracts';
import { linkOf, RegistryReader, whenPlaceable, type Logger, type NatsConnection, type NatsLink } from '@kandev/runtime';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm } from '@nats-io/kv';

const enc = new TextEncoder();

/**
 * The execution registry as its writer sees it: the lifecycle instance that owns an execution puts
 * its entry and deletes it; reads (and the key scheme) are `RegistryReader`'s, which other services
 * use to read the bucket themselves (ADR 0011). The bucket's max age is the liveness TTL: the owner
 * re-puts its entries every TTL/3, so the entries of a dead instance vanish on their own. Every
 * value is validated when written and when read.
 */
export class ExecutionRegistry extends RegistryReader {
  private constructor(
    kv: KV,
    jsm: JetStreamManager,
    log: Logger,
    private readonly link: NatsLink | undefined,
    private readonly ttlMs: number,
  ) {
    super(kv, jsm, log, link?.requestTimeoutMs);
  }

  static async open(nc: NatsConnection, ttlMs: number, log: Logger, replicas = 1): Promise<ExecutionRegistry> {
    const kv = await whenPlaceable(() => new Kvm(nc).create(Buckets.executions, { history: 1, ttl: ttlMs, replicas }), {
      what: `bucket ${Buckets.executions}`,
      log,
    });
    const status = await kv.status();
    if (status.replicas !== replicas)
      log.warn(
        { bucket_replicas: status.replicas, configured_replicas: replicas },
        'registry bucket has a different replica count than KANDEV_JS_REPLICAS; left as is',
      );
    // The first instance creates the bucket; later ones get its TTL. A mismatch means replicas were
    // configured differently, and entries of the one with the longer refresh period could lapse.
    if (status.ttl !== ttlMs) log.warn({ bucket_ttl_ms: status.ttl, configured_ttl_ms: ttlMs }, 'registry bucket has a different TTL than REGISTRY_TTL_MS');
    // No account-info check: the bucket was just created or opened, so the JetStream API answers.
    return new ExecutionRegistry(kv, await jetstreamManager(nc, { checkAPI: false }), log, linkOf(nc), ttlMs);
  }

  async put(e: Execution): Promise<void> {
    const checked = Execution.parse(e);
    // A put sent while the connection is down is dropped at the client's next reconnect attempt and
    // fails only at its timeout, holding up the refreshes queued behind it until the entry lapses
    // (seen after a NATS restart: the entry gone while its agent ran on). Sent once connected, it
    // lands within the TTL (ADR 0014).
    if (this.link && !this.link.connected) await this.link.sendable(this.ttlMs, 'registry put');
    await this.kv.put(RegistryReader.key(checked.task_id, checked.execution_id), enc.encode(JSON.stringify(checked)));
  }

  /** `taskId`, when the caller knows it, saves the key lookup. */
  async delete(executionId: string, taskId?: string): Promise<void> {
    const key = taskId ? RegistryReader.key(taskId, executionId) : await this.keyOf(executionId);
    if (key) await this.kv.delete(key);
  }
}
