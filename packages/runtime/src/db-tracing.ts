import { SpanStatusCode, type Span } from '@opentelemetry/api';
import {
  ATTR_DB_COLLECTION_NAME,
  ATTR_DB_NAMESPACE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_RESPONSE_STATUS_CODE,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
  type SpanAttributes,
} from './semconv.js';
import { SpanKind, tracer } from './tracing.js';

/** A statement's span name (its db.query.summary) and the attributes that follow from its text. */
export interface StatementSummary {
  name: string;
  attributes: SpanAttributes;
}

const FIRST_WORD = /^\s*(?:--[^\n]*\n\s*)*([A-Za-z]+)/;
const IDENT = '(?:"[^"]+"|[A-Za-z_][\\w$]*)(?:\\.(?:"[^"]+"|[A-Za-z_][\\w$]*))?';
/** The first table a statement names: after INTO or UPDATE, or after FROM or JOIN when it is not a function call (`FROM unnest(...)`). */
const TARGET = new RegExp(`\\b(?:(?:INTO|UPDATE)\\s+(${IDENT})|(?:FROM|JOIN)\\s+(${IDENT})(?![\\w$.])(?!\\s*\\())`, 'i');
const MAIN_OPERATION = /\b(SELECT|INSERT|UPDATE|DELETE|MERGE)\b/i;
const INNERMOST_PARENS = /\([^()]*\)/g;
const QUOTED = /'(?:[^']|'')*'/g;

/** The statement at its top level: literals emptied, every parenthesised part (sub-queries, CTE bodies, column lists) reduced to `()`. */
function topLevel(text: string): string {
  let s = text.replace(QUOTED, "''");
  for (let previous = ''; previous !== s;) {
    previous = s;
    s = s.replace(INNERMOST_PARENS, '()');
  }
  return s;
}

/**
 * `db.query.summary` of a statement, from its text alone: the operation (the first keyword; for a
 * `WITH` statement the data operation after its CTEs) and the first table its top level names, as
 * `SELECT tasks`. Values are never part of it: the statement's parameters are not looked at, and
 * a tagged template's text holds only placeholders where values go. A heuristic, not a parser:
 * for a complex statement it names one operation and one table.
 */
export function summarizeStatement(text: string): StatementSummary {
  const top = topLevel(text);
  let operation = FIRST_WORD.exec(top)?.[1]?.toUpperCase() ?? 'SQL';
  if (operation === 'WITH') operation = MAIN_OPERATION.exec(top.slice(top.search(/with/i) + 4))?.[1]?.toUpperCase() ?? operation;
  const m = TARGET.exec(top);
  const target = (m?.[1] ?? m?.[2])?.replaceAll('"', '');
  const summary = target ? `${operation} ${target}` : operation;
  return {
    name: summary,
    attributes: {
      [ATTR_DB_OPERATION_NAME]: operation,
      [ATTR_DB_QUERY_SUMMARY]: summary,
      ...(target ? { [ATTR_DB_COLLECTION_NAME]: target } : {}),
    },
  };
}

/** Summaries of tagged-template statements, per call site (a template's strings array is one object per site). */
const templates = new WeakMap<TemplateStringsArray, StatementSummary>();
const isTemplate = (x: unknown): x is TemplateStringsArray => Array.isArray(x) && Array.isArray((x as unknown as TemplateStringsArray).raw);

function templateSummary(strings: TemplateStringsArray): StatementSummary {
  let s = templates.get(strings);
  if (!s) {
    s = summarizeStatement(strings.join('$'));
    templates.set(strings, s);
  }
  return s;
}

type Thenable = { then: (onFulfilled?: (v: unknown) => unknown, onRejected?: (e: unknown) => unknown) => Promise<unknown> };

/**
 * Make `query` (a postgres.js Query: a promise that runs its statement when first awaited) open a
 * CLIENT span when it runs and end it when it settles. A query that is never awaited (a fragment
 * nested in another statement) runs nothing and gets no span.
 */
function instrument<Q>(query: Q, summary: StatementSummary, connection: SpanAttributes): Q {
  const q = query as unknown as Thenable;
  const then = q.then;
  let span: Span | undefined;
  q.then = function (onFulfilled, onRejected) {
    if (!span) {
      const started = tracer().startSpan(summary.name, { kind: SpanKind.CLIENT, attributes: { ...connection, ...summary.attributes } });
      span = started;
      void then.call(
        q,
        () => started.end(),
        (e: unknown) => {
          const code = (e as { code?: unknown } | null)?.code;
          if (typeof code === 'string') {
            started.setAttribute(ATTR_ERROR_TYPE, code);
            if (/^[0-9A-Z]{5}$/.test(code)) started.setAttribute(ATTR_DB_RESPONSE_STATUS_CODE, code);
          }
          started.setStatus({ code: SpanStatusCode.ERROR });
          started.end();
        },
      );
    }
    return then.call(q, onFulfilled, onRejected);
  };
  return query;
}

/** What the pool's spans say about where they go: the database system, `{database}|{schema}`, the server. */
export function connectionAttributes(url: string, schema: string): SpanAttributes {
  const attributes: SpanAttributes = { [ATTR_DB_SYSTEM_NAME]: DB_SYSTEM_NAME_VALUE_POSTGRESQL, [ATTR_DB_NAMESPACE]: schema };
  try {
    const u = new URL(url);
    const database = decodeURIComponent(u.pathname.replace(/^\//, ''));
    // The PostgreSQL conventions' db.namespace: `{database}|{schema}`.
    if (database) attributes[ATTR_DB_NAMESPACE] = `${database}|${schema}`;
    if (u.hostname) attributes[ATTR_SERVER_ADDRESS] = u.hostname;
    if (u.port) attributes[ATTR_SERVER_PORT] = Number(u.port);
  } catch {
    // not a URL (a connection string postgres.js reads otherwise): the schema alone
  }
  return attributes;
}

/**
 * The pool (or a transaction, a reserved connection) with a span per statement it runs: tagged
 * templates, `unsafe`, and the same for the transactions (`begin`, `savepoint`) and reserved
 * connections it opens. Everything else passes through. Installed only when spans are recorded
 * (connectDb): with no exporter the pool is the driver's own, at no cost per statement.
 */
export function tracedSql<S extends object>(sql: S, connection: SpanAttributes): S {
  const wrapCallback = (args: unknown[]) => {
    const fn = args[args.length - 1];
    if (typeof fn === 'function') args[args.length - 1] = (tx: object) => (fn as (t: object) => unknown)(tracedSql(tx, connection));
    return args;
  };
  return new Proxy(sql, {
    apply(target, thisArg, args: unknown[]) {
      const result: unknown = Reflect.apply(target as (...a: unknown[]) => unknown, thisArg, args);
      return isTemplate(args[0]) ? instrument(result, templateSummary(args[0]), connection) : result;
    },
    get(target, prop, receiver) {
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      const fn = value as (...a: unknown[]) => unknown;
      switch (prop) {
        case 'unsafe':
          return (text: string, ...rest: unknown[]) => instrument(fn.call(target, text, ...rest), summarizeStatement(text), connection);
        case 'begin':
        case 'savepoint':
          return (...args: unknown[]) => fn.apply(target, wrapCallback(args));
        case 'reserve':
          return async (...args: unknown[]) => tracedSql((await fn.apply(target, args)) as object, connection);
        default:
          return value;
      }
    },
  });
}
