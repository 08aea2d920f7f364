import { serverTestConfig } from '../../vitest.shared.js';

export default serverTestConfig();
