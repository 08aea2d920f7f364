import { afterAll, beforeAll, it } from 'vitest';
import type { World } from '../test/support.js';
import { startLoadWorld, stopsUnderLoad } from '../test/stops-under-load.js';

/** Issue 11, the heavy variant (`npm run test:faults`): as test/stops-under-load.test.ts with 40 live agents. */
let w: World;
beforeAll(async () => {
  w = await startLoadWorld();
}, 120_000);
afterAll(async () => w?.stop());

it('40 live agents: every task stop and every listing during the teardowns answers 200 within the budget', async () => {
  await stopsUnderLoad(w, 40);
}, 600_000);
