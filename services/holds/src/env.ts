import { BaseEnv } from '@kandev/runtime';

export const HoldsEnv = BaseEnv.extend({});
