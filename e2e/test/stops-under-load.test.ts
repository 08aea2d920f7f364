import { afterAll, beforeAll, it } from 'vitest';
import type { World } from './support.js';
import { startLoadWorld, stopsUnderLoad } from './stops-under-load.js';

/** Issue 11: operator task stops and execution listings answer within their budget while agents are torn down (8 agents; 40 in `npm run test:faults`). */
let w: World;
beforeAll(async () => {
  w = await startLoadWorld();
});
afterAll(async () => w?.stop());

it('8 live agents: every task stop and every listing during the teardowns answers 200 within the budget', async () => {
  await stopsUnderLoad(w, 8);
}, 180_000);
