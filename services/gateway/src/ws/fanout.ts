import { subscribeLiveEvents, type Logger, type NatsConnection } from '@kandev/runtime';
import { inboxChangeOf, isPushedSubject, notificationTargets, toNotification, workspaceKey } from '../domain/notifications.js';
import type { WsClient } from './client.js';
import type { SubscriptionRegistry } from './subscriptions.js';

/**
 * ONE core subscription on `kandev.evt.>` per gateway process, fanned out in memory to the sockets
 * subscribed to the event's task. Live push is best effort by design (a socket that was not
 * connected does not get a replay); the durable record is the orchestrator's state.
 */
export function startLiveFanout(nc: NatsConnection, log: Logger, subscriptions: SubscriptionRegistry<WsClient>): { stop(): void } {
  const sub = subscribeLiveEvents(
    nc,
    log,
    (ev) => {
      const targets = notificationTargets(ev);
      if (targets.length === 0) return;
      const clients = subscriptions.subscribersOf(targets);
      if (clients.size === 0) return;
      const text = JSON.stringify(toNotification(ev));
      for (const c of clients) c.sendText(text);
      // workspace subscribers (the board, the inbox) also learn that the inbox changed.
      const inbox = inboxChangeOf(ev);
      if (inbox) {
        const watchers = subscriptions.subscribersOf([workspaceKey(ev.workspace_id)]);
        if (watchers.size > 0) {
          const inboxText = JSON.stringify(inbox);
          for (const c of watchers) c.sendText(inboxText);
        }
      }
    },
    // Decoded only when some socket watches something and the type is one the gateway pushes.
    (subject) => subscriptions.taskCount > 0 && isPushedSubject(subject),
  );
  return { stop: () => sub.unsubscribe() };
}
