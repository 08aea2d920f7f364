/**
 * Which sockets watch which tasks, in this process's memory only (the gateway keeps no data; a
 * client that reconnects to another replica subscribes again). Both directions are indexed so a
 * closing socket is removed without scanning every task.
 */
export class SubscriptionRegistry<C> {
  readonly #byTask = new Map<string, Set<C>>();
  readonly #byClient = new Map<C, Set<string>>();

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
