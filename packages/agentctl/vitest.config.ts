import { serverTestConfig } from '../../vitest.shared.js';

// Every test spawns real agentctl and agent processes, which mostly wait: files run side by side.
export default serverTestConfig();
