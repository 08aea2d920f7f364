import { trace } from '@opentelemetry/api';
import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

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
