import { AsyncLocalStorage } from 'node:async_hooks';
import type { z } from 'zod';

/*
 * What the serving side (rpc-serve.ts) and the requesting side (rpc-request.ts) share inside this
 * package: the request a handler is serving, so the requests it makes in turn inherit its deadline
 * and request id. Not part of the package's surface.
 */

/** The request a handler is serving, for the requests it makes in turn (see `request()`). */
export interface Serving {
  requestId: string;
  /** When the handler's own waits end: the caller's deadline less the reply's reserve. */
  waitsEndBy: number | undefined;
  /** False once the reply is sent: work the handler left running no longer inherits its deadline or request id. */
  active: boolean;
  /** The gateway's assertion behind this request, passed on with the operator actor (identity.ts). */
  operatorAssertion?: string | undefined;
}
export const serving = new AsyncLocalStorage<Serving>();

export const zodIssues = (e: z.ZodError) => ({ issues: e.issues.map((i) => ({ path: i.path.join('.'), message: i.message })) });
