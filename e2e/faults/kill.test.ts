import { STACK_SERVICES } from '@kandev/testkit';
import { faultMatrix, kill9, useFaultWorld } from '../test/fault-world.js';

/**
 * Issue 11 (`npm run test:faults`): kill -9 of each service in the middle of a stop, an interrupt
 * and a cancel (e2e/test/fault-world.ts). After the restart the invariant checker passes over what
 * each caller was told, and the stack serves again.
 */
faultMatrix(useFaultWorld(), STACK_SERVICES.map(kill9));
