export * from './paths.js';
export * from './nats.js';
export * from './pg.js';
export * from './stack.js';
export * from './clients.js';
export * from './procs.js';
export * from './invariants.js';
