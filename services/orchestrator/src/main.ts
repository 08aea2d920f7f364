import { runService } from '@kandev/runtime';
import { orchestratorService } from './service.js';

await runService(orchestratorService);
