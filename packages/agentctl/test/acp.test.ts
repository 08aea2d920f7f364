import { afterEach } from 'vitest';
import { killAll } from './harness.js';
import { describeProtocol } from './protocol-suite.js';

afterEach(killAll);

describeProtocol('scripted-acp');
