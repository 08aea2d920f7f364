import { trace } from '@opentelemetry/api';
import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** A log method in pino's argument order: the fields first, then the message; or the message alone. */
export interface LogFn {
  (fields: object, msg: string): void;
  (msg: string): void;
}

/**
 * The logging interface every package writes to: pino's methods in pino's argument order. A
 * service's pino `Logger` is one; agentctl, which stays without pino, writes its own JSON lines
 * behind the same interface.
 */
export interface LogWriter {
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  child(fields: Record<string, unknown>): LogWriter;
}

/** JSON lines on stdout, with the active trace and span ids stamped on every line. */
export function createLogger(service: string, level = 'info', instanceId?: string): Logger {
  return pino({
    level,
    base: { service, ...(instanceId ? { instance_id: instanceId } : {}) },
    timestamp: pino.stdTimeFunctions.isoTime,
    messageKey: 'msg',
    formatters: { level: (label) => ({ level: label }) },
    redact: { paths: ['token', '*.token', 'authorization', '*.authorization', 'secret', '*.secret'], censor: '[redacted]' },
    mixin() {
      const span = trace.getActiveSpan();
      if (!span) return {};
      const c = span.spanContext();
      return { trace_id: c.traceId, span_id: c.spanId };
    },
  });
}
