import type { ServiceRuntime } from '@kandev/runtime';
import type { HoldsEnv } from '../env.js';

export type HoldsRuntime = ServiceRuntime<HoldsEnv>;

export interface CallContext {
  requestId: string;
  /** The handler's `afterReply` (packages/runtime rpc.ts): run once the reply is sent. Absent outside a handler. */
  afterReply?: (fn: () => unknown) => void;
}

/** Run `fn` once the current request's reply is out, or now (not awaited) when there is no request to reply to. */
export function afterReply(call: CallContext, fn: () => Promise<unknown>): void {
  if (call.afterReply) call.afterReply(fn);
  else void fn(); // fn handles its own failures
}
