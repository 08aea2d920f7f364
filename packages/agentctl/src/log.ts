import { trace } from '@opentelemetry/api';

/*
 * JSON log lines on stderr. stdout belongs to the event stream the parent parses, so nothing else may
 * ever write there. Secrets never reach a logger: callers log whether a token is set, not the token.
 */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  child(fields: LogFields): Logger;
}

const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export function createLogger(base: LogFields, minLevel: LogLevel = 'info', out: NodeJS.WritableStream = process.stderr): Logger {
  const write = (level: LogLevel, msg: string, fields: LogFields = {}) => {
    if (rank[level] < rank[minLevel]) return;
    const span = trace.getActiveSpan()?.spanContext();
    const line = {
      time: new Date().toISOString(),
      level,
      ...base,
      msg,
      ...(span ? { trace_id: span.traceId, span_id: span.spanId } : {}),
      ...fields,
    };
    out.write(`${JSON.stringify(line, errorReplacer)}\n`);
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger({ ...base, ...fields }, minLevel, out),
  };
}

function errorReplacer(_key: string, value: unknown): unknown {
  return value instanceof Error ? { name: value.name, message: value.message } : value;
}

export const errorMessage = (err: unknown): string => (err instanceof Error ? err.message : String(err));
