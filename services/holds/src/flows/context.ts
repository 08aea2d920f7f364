import type { ServiceRuntime } from '@kandev/runtime';
import type { HoldsEnv } from '../env.js';

export type HoldsRuntime = ServiceRuntime<HoldsEnv>;

export interface CallContext {
  requestId: string;
}
