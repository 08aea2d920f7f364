export * from './errors.js';
export * from './enums.js';
export * from './envelope.js';
export * from './entities.js';
export * from './events.js';
export * from './subjects.js';
export * from './endpoints.js';
export * from './agentctl.js';
