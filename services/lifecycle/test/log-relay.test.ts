import type { Logger } from '@kandev/runtime';
import { describe, expect, it } from 'vitest';
import { relayAgentctlLog } from '../src/agentctl/log-relay.js';

/** A logger that records (level, fields, message) of each call. */
function recorder() {
  const calls: Array<[string, Record<string, unknown>, string]> = [];
  const at = (level: string) => (fields: Record<string, unknown>, msg: string) => void calls.push([level, fields, msg]);
  return { calls, log: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') } as unknown as Logger };
}

describe('agentctl log lines in the lifecycle log', () => {
  it('keeps warnings and errors at their level and puts the rest at debug', () => {
    const { calls, log } = recorder();
    for (const level of ['debug', 'info', 'warn', 'error'])
      relayAgentctlLog(log, JSON.stringify({ level, msg: `a ${level} line`, agent_pid: 7 }), { execution_id: 'x' });
    expect(calls.map(([level, , msg]) => [level, msg])).toEqual([
      ['debug', 'agentctl: a debug line'],
      ['debug', 'agentctl: a info line'],
      ['warn', 'agentctl: a warn line'],
      ['error', 'agentctl: a error line'],
    ]);
    expect(calls[3]![1]).toEqual({ execution_id: 'x', agentctl: { level: 'error', msg: 'a error line', agent_pid: 7 } });
  });

  it('reports a line that is not a log line (a crash trace) as a warning, cut to 2,000 characters', () => {
    const { calls, log } = recorder();
    relayAgentctlLog(log, `TypeError: boom ${'x'.repeat(3000)}`);
    relayAgentctlLog(log, '{"no":"msg"}');
    expect(calls.map(([level, fields, msg]) => [level, String(fields.agentctl_log).length, msg])).toEqual([
      ['warn', 2000, 'agentctl wrote a line that is not a log line'],
      ['warn', 12, 'agentctl wrote a line that is not a log line'],
    ]);
  });
});
