import { serverTestConfig } from '../../vitest.shared.js';

// test/agents/** (scripted agents) and test/start*.test.ts (the whole `npm start` stack).
export default serverTestConfig();
