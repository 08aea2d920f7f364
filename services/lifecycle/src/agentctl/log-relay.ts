import type { Logger } from '@kandev/runtime';

/**
 * One agentctl log line (JSON, one a line, on its stderr or in the file it writes once this
 * instance is gone) in this service's log. Its warnings and errors keep their level, so a tree that
 * survived SIGKILL or a stop that failed shows at the default level; the rest (an agent's stderr,
 * routine steps) stays at debug. A line that is not agentctl's JSON (a crash's stack trace) is a
 * warning.
 */
export function relayAgentctlLog(log: Logger, line: string, fields: Record<string, unknown> = {}): void {
  let parsed: unknown;
  try {
    parsed = JSON.parse(line);
  } catch {
    parsed = undefined;
  }
  if (!parsed || typeof parsed !== 'object' || typeof (parsed as { msg?: unknown }).msg !== 'string') {
    log.warn({ ...fields, agentctl_log: line.slice(0, 2000) }, 'agentctl wrote a line that is not a log line');
    return;
  }
  const entry = parsed as { level?: unknown; msg: string };
  const level = entry.level === 'error' ? 'error' : entry.level === 'warn' ? 'warn' : 'debug';
  log[level]({ ...fields, agentctl: entry }, `agentctl: ${entry.msg}`);
}
