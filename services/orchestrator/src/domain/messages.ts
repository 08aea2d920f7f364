import { conflict, type SessionState, type TaskStatus } from '@kandev/contracts';

export function assertQueueHasRoom(size: number, limit: number): void {
  if (size >= limit) throw conflict(`message queue is full (${size}/${limit})`, { size, limit });
}

/**
 * a CANCELLED task takes no message (message_task_kandev answers CONFLICT and stores nothing),
 * whether or not one of its sessions still runs: a message would only revive it.
 */
export function assertTakesMessages(task: { status: TaskStatus }): void {
  if (task.status === 'CANCELLED')
    throw conflict('task is CANCELLED: it takes no message until an operator sets another status or a restore returns it', { reason: 'task_cancelled' });
}

/** An idle session (between turns) takes a message at once; a working one queues it. */
export const sessionIsIdle = (state: SessionState) => state === 'WAITING_FOR_INPUT';

/** Attribution the child agent receives, as its own block before a message from another task. */
export function senderContext(sender: { id: string; title: string }): string {
  return `[Message from task "${sender.title}" (${sender.id})]`;
}

/**
 * Characters of each prompt a `queue.changed` event carries. A full queue of maximal prompts
 * (QUEUE_LIMIT × 100,000 characters) would exceed the NATS max payload and the event could never be
 * published; the event is a notification, GET /tasks/:id/queue has the full prompts.
 */
export const EVENT_PROMPT_PREVIEW = 2_000;

/** A queued message as a `queue.changed` event carries it: its prompt cut to the preview length. */
export function queueEventMessage<M extends { prompt: string }>(m: M): M {
  if (m.prompt.length <= EVENT_PROMPT_PREVIEW) return m;
  let cut = m.prompt.slice(0, EVENT_PROMPT_PREVIEW);
  // Never end on half a surrogate pair.
  if (/[\uD800-\uDBFF]$/.test(cut)) cut = cut.slice(0, -1);
  return { ...m, prompt: `${cut}…` };
}
