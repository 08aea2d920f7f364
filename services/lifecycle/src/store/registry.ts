import { Buckets, Execution, internalError, isKandevError, unavailable } from '@kandev/contracts';
import { DEFAULT_REQUEST_TIMEOUT_MS, remainingMs, type Logger, type NatsConnection } from '@kandev/runtime';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * The execution registry: NATS KV bucket, one key per execution, value = Execution. Every
 * value is validated when written and when read. The bucket's max age is the liveness TTL: the
 * owner re-puts its entries every TTL/3, so the entries of a dead instance vanish on their own.
 *
 * Listings never use `kv.keys()` (ADR 0009): on nats-server 2.9 its consumer can wait 30 s or for
 * ever when an entry ages out between the consumer's creation and its delivery. A listing is one
 * stream-info request naming the matching subjects, then one direct read per key, all within the
 * caller's deadline.
 */
export class ExecutionRegistry {
  private constructor(
    private readonly kv: KV,
    private readonly jsm: JetStreamManager,
    private readonly log: Logger,
  ) {}

  private static readonly stream = `KV_${Buckets.executions}`;
  private static readonly subjectPrefix = `$KV.${Buckets.executions}.`;

  static async open(nc: NatsConnection, ttlMs: number, log: Logger, replicas = 1): Promise<ExecutionRegistry> {
    const kv = await new Kvm(nc).create(Buckets.executions, { history: 1, ttl: ttlMs, replicas });
    const status = await kv.status();
    if (status.replicas !== replicas) log.warn({ bucket_replicas: status.replicas, configured_replicas: replicas }, 'registry bucket has a different replica count than KANDEV_JS_REPLICAS; left as is');
    // The first instance creates the bucket; later ones get its TTL. A mismatch means replicas were
    // configured differently, and entries of the one with the longer refresh period could lapse.
    if (status.ttl !== ttlMs) log.warn({ bucket_ttl_ms: status.ttl, configured_ttl_ms: ttlMs }, 'registry bucket has a different TTL than REGISTRY_TTL_MS');
    // No account-info check: the bucket was just created or opened, so the JetStream API answers.
    return new ExecutionRegistry(kv, await jetstreamManager(nc, { checkAPI: false }), log);
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

  /** With `taskId` one exact-key read; without, the key is looked up first (one more request). */
  async get(executionId: string, taskId?: string): Promise<Execution | null> {
    if (taskId) return this.within('registry read', () => this.read(ExecutionRegistry.key(taskId, executionId)));
    return (await this.list(`*.${executionId}`, 'registry lookup'))[0] ?? null;
  }

  /** `taskId`, when the caller knows it, saves the key lookup. */
  async delete(executionId: string, taskId?: string): Promise<void> {
    const key = taskId ? ExecutionRegistry.key(taskId, executionId) : (await this.within('registry lookup', () => this.keys(`*.${executionId}`)))[0];
    if (key) await this.kv.delete(key);
  }

  /** Every live entry (start-up cleanup; not on a request path). */
  async all(): Promise<Execution[]> {
    return this.list('>', 'registry listing');
  }

  async listForTask(taskId: string): Promise<Execution[]> {
    return (await this.list(`${taskId}.*`, 'registry listing')).sort((a, b) => a.started_at.localeCompare(b.started_at));
  }

  private list(filter: string, what: string): Promise<Execution[]> {
    return this.within(what, async () => this.readAll(await this.keys(filter)));
  }

  /**
   * The keys that have a message in the bucket, from one stream-info request with a subject
   * filter: the server answers from its subject index, with no consumer to wait on. Deleted keys
   * (their delete marker) are listed too; reading them gives null.
   */
  private async keys(filter: string): Promise<string[]> {
    const info = await this.jsm.streams.info(ExecutionRegistry.stream, { subjects_filter: `${ExecutionRegistry.subjectPrefix}${filter}` });
    return Object.keys(info.state.subjects ?? {}).map((s) => s.slice(ExecutionRegistry.subjectPrefix.length));
  }

  /**
   * Runs a read within the deadline of the request being served (DEFAULT_REQUEST_TIMEOUT_MS
   * outside one). Past it the read fails whole, never with part of the list: a caller that got
   * fewer executions than there are would stop fewer agents (issue 11).
   */
  private async within<T>(what: string, read: () => Promise<T>): Promise<T> {
    const budget = Math.floor(remainingMs() ?? DEFAULT_REQUEST_TIMEOUT_MS);
    if (budget <= 0) throw unavailable(`${what} not started: the caller's deadline has passed`);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(unavailable(`${what} did not finish within ${budget} ms`)), budget);
    });
    try {
      return await Promise.race([read(), late]);
    } catch (e) {
      if (isKandevError(e)) throw e;
      throw internalError(`${what} failed`, e);
    } finally {
      clearTimeout(timer);
    }
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
