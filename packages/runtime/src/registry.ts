import { Buckets, Execution, internalError, isKandevError, unavailable } from '@kandev/contracts';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/nats-core';
import type { Logger } from './log.js';
import { DEFAULT_REQUEST_TIMEOUT_MS, defaultRequestTimeoutMs, remainingMs } from './rpc.js';

const dec = new TextDecoder();

/** Up to this many tasks, a listing of their executions filters on the server, one request each (`listForTasks`). */
const PER_TASK_LISTINGS = 8;

/**
 * Reading the execution registry: the NATS KV bucket `KANDEV_EXECUTIONS`, one key per execution,
 * value = Execution, written only by the lifecycle instance that owns the execution (its
 * `ExecutionRegistry` adds the writes to this class). Services that must know what runs read the
 * bucket themselves through this class (ADR 0011): one round trip to nats-server, however busy the
 * lifecycle instances are. Every value read is validated.
 *
 * Listings never use `kv.keys()` (ADR 0009): on nats-server 2.9 its consumer can wait 30 s or for
 * ever when an entry ages out between the consumer's creation and its delivery. A listing is one
 * stream-info request naming the matching subjects, then one direct read per key, all within the
 * caller's deadline.
 */
export class RegistryReader {
  protected constructor(
    protected readonly kv: KV,
    private readonly jsm: JetStreamManager,
    protected readonly log: Logger,
    /** A read's budget outside a request being served (the connection's REQUEST_TIMEOUT_MS). */
    private readonly defaultBudgetMs = DEFAULT_REQUEST_TIMEOUT_MS,
  ) {}

  private static readonly stream = `KV_${Buckets.executions}`;
  private static readonly subjectPrefix = `$KV.${Buckets.executions}.`;

  /**
   * The bucket as it is, without a round trip: the lifecycle creates it (with its TTL), and a read
   * before any lifecycle instance ever started fails (it is an error, never "nothing runs"). Reads go
   * to the stream's direct-get API, which every replica answers.
   */
  static async bind(nc: NatsConnection, log: Logger): Promise<RegistryReader> {
    const kv = await new Kvm(nc).open(Buckets.executions, { allow_direct: true });
    return new RegistryReader(kv, await jetstreamManager(nc, { checkAPI: false }), log, defaultRequestTimeoutMs(nc));
  }

  /**
   * Key = `<task_id>.<execution_id>`: listing a task's executions is a server-side subject filter
   * (`<task_id>.*`), not a scan of every running agent (a stop lists its task's registry on the
   * hot path, R-1, R-2.1).
   */
  static key(taskId: string, executionId: string): string {
    return `${taskId}.${executionId}`;
  }

  /** The task id a key starts with (`key`'s inverse). */
  private static taskOfKey(key: string): string {
    return key.slice(0, key.indexOf('.'));
  }

  /** With `taskId` one exact-key read; without, the key is looked up first (one more request). */
  async get(executionId: string, taskId?: string): Promise<Execution | null> {
    if (taskId) return this.within('registry read', () => this.read(RegistryReader.key(taskId, executionId)));
    return (await this.list(`*.${executionId}`, 'registry lookup'))[0] ?? null;
  }

  /** Every live entry (start-up cleanup; not on a request path). */
  async all(): Promise<Execution[]> {
    return this.list('>', 'registry listing');
  }

  /** The task's executions, oldest first. */
  async listForTask(taskId: string): Promise<Execution[]> {
    return (await this.list(`${taskId}.*`, 'registry listing')).sort((a, b) => a.started_at.localeCompare(b.started_at));
  }

  /**
   * The executions of these tasks (a tree hold's members), oldest first within each task. Up to
   * PER_TASK_LISTINGS tasks, one filtered listing each; more, one listing of the whole bucket
   * filtered here by the task id the key starts with: a 1,000-task tree cost 1,000 stream-info
   * requests at the start of its pause, and again at every reconcile pass while it was held.
   */
  async listForTasks(taskIds: readonly string[]): Promise<Execution[]> {
    if (taskIds.length <= PER_TASK_LISTINGS) return (await Promise.all(taskIds.map((id) => this.listForTask(id)))).flat();
    const wanted = new Set(taskIds);
    const listed = await this.within('registry listing', async () =>
      this.readAll((await this.keys('>')).filter((k) => wanted.has(RegistryReader.taskOfKey(k)))),
    );
    const order = new Map(taskIds.map((id, i) => [id, i]));
    return listed.sort((a, b) => (order.get(a.task_id) ?? 0) - (order.get(b.task_id) ?? 0) || a.started_at.localeCompare(b.started_at));
  }

  /** The key of an execution, looked up by its id alone (one request). */
  protected async keyOf(executionId: string): Promise<string | undefined> {
    return (await this.within('registry lookup', () => this.keys(`*.${executionId}`)))[0];
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
    const info = await this.jsm.streams.info(RegistryReader.stream, { subjects_filter: `${RegistryReader.subjectPrefix}${filter}` });
    return Object.keys(info.state.subjects ?? {}).map((s) => s.slice(RegistryReader.subjectPrefix.length));
  }

  /**
   * Runs a read within the deadline of the request being served (the connection's default,
   * REQUEST_TIMEOUT_MS, outside one). Past it the read fails whole, never with part of the list: a caller that got
   * fewer executions than there are would stop fewer agents (R-2.1, docs/requirements.md).
   */
  private async within<T>(what: string, read: () => Promise<T>): Promise<T> {
    const budget = Math.floor(remainingMs() ?? this.defaultBudgetMs);
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
   * so a stop answers INTERNAL_ERROR instead of NOT_FOUND or a stop that misses an agent. A key
   * deleted between listing and reading reads as null (gone), and a value that breaks the contract
   * is logged and skipped (see decode).
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
