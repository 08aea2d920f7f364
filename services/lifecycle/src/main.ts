import { runService } from '@kandev/runtime';
import { lifecycleService } from './service.js';

await runService(lifecycleService);
