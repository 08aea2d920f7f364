import { conflict, type SessionState } from '@kandev/contracts';

export function assertQueueHasRoom(size: number, limit: number): void {
  if (size >= limit) throw conflict(`message queue is full (${size}/${limit})`, { size, limit });
}

/** An idle session (between turns) takes a message at once; a working one queues it. */
export const sessionIsIdle = (state: SessionState) => state === 'WAITING_FOR_INPUT';

/** Attribution the child agent receives, as its own block before a message from another task. */
export function senderContext(sender: { id: string; title: string }): string {
  return `[Message from task "${sender.title}" (${sender.id})]`;
}
