import { runService } from '@kandev/runtime';
import { gatewayService } from './service.js';

await runService(gatewayService);
