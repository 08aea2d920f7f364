export * from './directive.js';
export * from './request.js';
export * from './server.js';
export * from './real-agents.js';
