import { faultMatrix, lifecycleStall, useFaultWorld } from '../test/fault-world.js';

/**
 * Issue 11, the long faults (`npm run test:faults`): lifecycle stalled (SIGSTOP) for twice the
 * registry TTL with a stop, an interrupt or a cancel sent meanwhile (e2e/test/fault-world.ts).
 * After SIGCONT the invariant checker passes over what each caller was told: nothing runs
 * unregistered or unwanted, and the stack serves again.
 */
faultMatrix(useFaultWorld(), [lifecycleStall], 'with a $name sent during the stall');
