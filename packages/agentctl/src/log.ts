import { appendFileSync, mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { trace } from '@opentelemetry/api';
import type { LogFn, LogWriter } from '@kandev/runtime';

/*
 * JSON log lines on stderr. stdout belongs to the event stream the parent parses, so nothing else may
 * ever write there. Secrets never reach a logger: callers log whether a token is set, not the token.
 */

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;
/** The one logging interface of the packages (@kandev/runtime): pino's, fields first. */
export type Logger = LogWriter;

const rank: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

/** Where log lines go: anything with a `write` of one line. */
export interface LogOutput {
  write(line: string): unknown;
}

export function createLogger(base: LogFields, minLevel: LogLevel = 'info', out: LogOutput = process.stderr): Logger {
  const write = (level: LogLevel, fields: object, msg: string) => {
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
  const method =
    (level: LogLevel): LogFn =>
    (first: object | string, msg?: string) =>
      typeof first === 'string' ? write(level, {}, first) : write(level, first, msg ?? '');
  return {
    debug: method('debug'),
    info: method('info'),
    warn: method('warn'),
    error: method('error'),
    child: (fields) => createLogger({ ...base, ...fields }, minLevel, out),
  };
}

/**
 * stderr, until the parent that reads it is gone: then (with a file to go to) each line is
 * appended to that file, synchronously, so the lines of a stop that follows the parent's death
 * (which signals were sent, what survived) are on disk before agentctl exits. The parent's next
 * run reads the file (the lifecycle's start-up cleanup).
 */
export class DivertableOutput implements LogOutput {
  private file: string | undefined;
  constructor(private readonly stderr: LogOutput = process.stderr) {}

  /** Never throws: it runs on the way to stopping the agent, which must not be kept from happening. */
  divertTo(file: string): void {
    try {
      mkdirSync(dirname(file), { recursive: true });
      this.file = file;
    } catch {
      // The file's directory cannot be made: the lines go where they went.
    }
  }

  write(line: string): void {
    if (this.file === undefined) {
      this.stderr.write(line);
      return;
    }
    try {
      appendFileSync(this.file, line);
    } catch {
      // Nowhere left to say it: the parent's pipe is closed and the file cannot be written.
    }
  }
}

function errorReplacer(_key: string, value: unknown): unknown {
  return value instanceof Error ? { name: value.name, message: value.message } : value;
}

export const errorMessage = (err: unknown): string => (err instanceof Error ? err.message : String(err));
