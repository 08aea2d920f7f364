import { serverTestConfig, testJwtSecret } from '../../vitest.shared.js';

export default serverTestConfig(testJwtSecret());
