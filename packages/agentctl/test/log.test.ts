import { describe, expect, it } from 'vitest';
import { createLogger as createServiceLogger, type LogWriter } from '@kandev/runtime';
import { createLogger } from '../src/log.js';

/** agentctl's logger and the services' (pino) are one interface: fields first, then the message, or the message alone. */
describe('agentctl logger', () => {
  const lines: string[] = [];
  const log: LogWriter = createLogger({ service: 'agentctl', execution_id: 'x1' }, 'info', { write: (l) => lines.push(l) });

  it('writes the fields and the message in pino order, one JSON line each', () => {
    lines.length = 0;
    log.info({ turn_id: 't1', code: 0 }, 'turn completed');
    log.warn('no fields');
    log.child({ task_id: 'k1' }).error({ err: 'boom' }, 'failed');
    log.debug({ hidden: true }, 'below the level');
    expect(lines.map((l) => JSON.parse(l) as Record<string, unknown>)).toMatchObject([
      { level: 'info', service: 'agentctl', execution_id: 'x1', msg: 'turn completed', turn_id: 't1', code: 0 },
      { level: 'warn', msg: 'no fields' },
      { level: 'error', task_id: 'k1', msg: 'failed', err: 'boom' },
    ]);
    expect(lines).toHaveLength(3);
  });

  it('is the interface a service logger implements too', () => {
    // Type-checked by `npm run lint` (tsconfig.lint.json): fails there once pino's Logger no longer satisfies the interface agentctl implements.
    const service: LogWriter = createServiceLogger('test', 'silent');
    expect(() => service.info({ a: 1 }, 'fields first')).not.toThrow();
  });
});
