/**
 * Which sockets watch which tasks, in this process's memory only (the gateway keeps no data; a
 * client that reconnects to another replica subscribes again). Both directions are indexed so a
 * closing socket is removed without scanning every task.
 */
export class SubscriptionRegistry<C> {
  readonly #byTask = new Map<string, Set<C>>();
  readonly #byClient = new Map<C, Set<string>>();
  /** Places held by subscribes still being checked, per client (reserve). */
  readonly #reserved = new Map<C, number>();

  /**
   * Holds one of the client's `limit` places while a subscribe is checked. Synchronous, so frames
   * that arrive together cannot all pass the count before any of them is added (the check awaits
   * the orchestrator). Returns the release (call it once the subscribe is added or refused), or
   * null when subscriptions and held places already reach `limit`.
   */
  reserve(client: C, limit: number): (() => void) | null {
    const held = this.#reserved.get(client) ?? 0;
    if (this.countOf(client) + held >= limit) return null;
    this.#reserved.set(client, held + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const n = (this.#reserved.get(client) ?? 1) - 1;
      if (n <= 0) this.#reserved.delete(client);
      else this.#reserved.set(client, n);
    };
  }

  /** True when this is a new subscription. */
  add(client: C, taskId: string): boolean {
    const tasks = this.#byClient.get(client) ?? new Set<string>();
    if (tasks.has(taskId)) return false;
    tasks.add(taskId);
    this.#byClient.set(client, tasks);
    const clients = this.#byTask.get(taskId) ?? new Set<C>();
    clients.add(client);
    this.#byTask.set(taskId, clients);
    return true;
  }

  /** True when the client was subscribed. */
  remove(client: C, taskId: string): boolean {
    const tasks = this.#byClient.get(client);
    if (!tasks?.delete(taskId)) return false;
    if (tasks.size === 0) this.#byClient.delete(client);
    this.#dropFromTask(taskId, client);
    return true;
  }

  removeClient(client: C): void {
    const tasks = this.#byClient.get(client);
    if (!tasks) return;
    this.#byClient.delete(client);
    for (const taskId of tasks) this.#dropFromTask(taskId, client);
  }

  /** Every client subscribed to at least one of these tasks, each once. */
  subscribersOf(taskIds: Iterable<string>): Set<C> {
    const out = new Set<C>();
    for (const id of taskIds) for (const c of this.#byTask.get(id) ?? []) out.add(c);
    return out;
  }

  countOf(client: C): number {
    return this.#byClient.get(client)?.size ?? 0;
  }

  get taskCount(): number {
    return this.#byTask.size;
  }

  #dropFromTask(taskId: string, client: C): void {
    const clients = this.#byTask.get(taskId);
    if (!clients) return;
    clients.delete(client);
    if (clients.size === 0) this.#byTask.delete(taskId);
  }
}
