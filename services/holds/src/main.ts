import { runService } from '@kandev/runtime';
import { holdsService } from './service.js';

await runService(holdsService);
