import { runService } from '@kandev/runtime';
import { mcpService } from './service.js';

await runService(mcpService);
