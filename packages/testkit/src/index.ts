export * from './paths.js';
export * from './nats.js';
export * from './pg.js';
