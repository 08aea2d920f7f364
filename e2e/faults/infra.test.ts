import { faultMatrix, natsRestart, pgRefusing, useFaultWorld } from '../test/fault-world.js';

/**
 * Issue 11, infrastructure faults (`npm run test:faults`) in the middle of a stop, an interrupt and
 * a cancel (e2e/test/fault-world.ts): nats-server restarted (down 2 s, same port and JetStream
 * store), and PostgreSQL refusing connections to the system's database for 3 s. Every request is
 * answered; after recovery the invariant checker passes over the answers and the stack serves again.
 */
faultMatrix(useFaultWorld(), [natsRestart, pgRefusing]);
