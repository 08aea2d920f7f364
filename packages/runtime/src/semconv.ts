/**
 * The span attribute names and values this system uses, from the installed
 * @opentelemetry/semantic-conventions (1.45.0, pinned in package.json): stable names from its main
 * entry, the rest from its `incubating` entry. A rename in a new version breaks the build here,
 * not a dashboard later. The span catalogue is in docs/operations.md ("Traces").
 */
import {
  ATTR_DB_COLLECTION_NAME,
  ATTR_DB_NAMESPACE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_RESPONSE_STATUS_CODE,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ERROR_TYPE,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_INSTANCE_ID,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_FULL,
  ATTR_URL_PATH,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
} from '@opentelemetry/semantic-conventions';
import {
  ATTR_ENDUSER_ID,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_JSONRPC_REQUEST_ID,
  ATTR_MCP_METHOD_NAME,
  ATTR_MCP_PROTOCOL_VERSION,
  ATTR_MCP_SESSION_ID,
  ATTR_MESSAGING_BATCH_MESSAGE_COUNT,
  ATTR_MESSAGING_CONSUMER_GROUP_NAME,
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_DESTINATION_TEMPLATE,
  ATTR_MESSAGING_OPERATION_NAME,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_SYSTEM,
  ATTR_MESSAGING_SYSTEM_NAME,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
  MCP_METHOD_NAME_VALUE_TOOLS_CALL,
  MESSAGING_OPERATION_TYPE_VALUE_PROCESS,
  MESSAGING_OPERATION_TYPE_VALUE_SEND,
} from '@opentelemetry/semantic-conventions/incubating';

export {
  ATTR_DB_COLLECTION_NAME,
  ATTR_DB_NAMESPACE,
  ATTR_DB_OPERATION_NAME,
  ATTR_DB_QUERY_SUMMARY,
  ATTR_DB_RESPONSE_STATUS_CODE,
  ATTR_DB_SYSTEM_NAME,
  ATTR_ENDUSER_ID,
  ATTR_ERROR_TYPE,
  ATTR_GEN_AI_OPERATION_NAME,
  ATTR_GEN_AI_TOOL_NAME,
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_JSONRPC_REQUEST_ID,
  ATTR_MCP_METHOD_NAME,
  ATTR_MCP_PROTOCOL_VERSION,
  ATTR_MCP_SESSION_ID,
  ATTR_MESSAGING_BATCH_MESSAGE_COUNT,
  ATTR_MESSAGING_CONSUMER_GROUP_NAME,
  ATTR_MESSAGING_DESTINATION_NAME,
  ATTR_MESSAGING_DESTINATION_TEMPLATE,
  ATTR_MESSAGING_OPERATION_NAME,
  ATTR_MESSAGING_OPERATION_TYPE,
  ATTR_MESSAGING_SYSTEM,
  ATTR_MESSAGING_SYSTEM_NAME,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_INSTANCE_ID,
  ATTR_SERVICE_NAME,
  ATTR_SERVICE_VERSION,
  ATTR_URL_FULL,
  ATTR_URL_PATH,
  DB_SYSTEM_NAME_VALUE_POSTGRESQL,
  GEN_AI_OPERATION_NAME_VALUE_EXECUTE_TOOL,
  MCP_METHOD_NAME_VALUE_TOOLS_CALL,
  MESSAGING_OPERATION_TYPE_VALUE_PROCESS,
  MESSAGING_OPERATION_TYPE_VALUE_SEND,
};

/**
 * `messaging.system(.name)` of NATS. The conventions list no value for NATS (the attribute is an
 * open enum), so this is the system's own lower-case name, as for the listed systems.
 */
export const MESSAGING_SYSTEM_NATS = 'nats';

/** Span attributes, as the OTel API takes them. */
export type SpanAttributes = Record<string, string | number | boolean>;

/**
 * The attributes every NATS span carries. `messaging.system.name` is the current name; the
 * installed conventions deprecate `messaging.system` for it, which is kept beside it because
 * backends still key on it (service graphs draw messaging edges from it).
 */
const NATS_SYSTEM: SpanAttributes = { [ATTR_MESSAGING_SYSTEM_NAME]: MESSAGING_SYSTEM_NATS, [ATTR_MESSAGING_SYSTEM]: MESSAGING_SYSTEM_NATS };

/**
 * Span name and attributes of one messaging operation on a subject: `send <template>` /
 * `process <template>`, per the messaging conventions' `{operation name} {destination}`, with the
 * subject template (ids replaced by `*`) in the name so names stay low-cardinality.
 */
export function messagingSpan(
  operation: 'send' | 'process',
  subject: string,
  template: string,
  extra: SpanAttributes = {},
): { name: string; attributes: SpanAttributes } {
  return {
    name: `${operation} ${template}`,
    attributes: {
      ...NATS_SYSTEM,
      [ATTR_MESSAGING_OPERATION_TYPE]: operation === 'send' ? MESSAGING_OPERATION_TYPE_VALUE_SEND : MESSAGING_OPERATION_TYPE_VALUE_PROCESS,
      [ATTR_MESSAGING_OPERATION_NAME]: operation,
      [ATTR_MESSAGING_DESTINATION_NAME]: subject,
      ...(template !== subject ? { [ATTR_MESSAGING_DESTINATION_TEMPLATE]: template } : {}),
      ...extra,
    },
  };
}

/** `METHOD /route` of an HTTP server span (the conventions' `{method} {http.route}`). */
export const httpServerSpanName = (method: string, route: string): string => `${method} ${route}`;

/** Method and route of an HTTP server span, set when it starts (`http.response.status_code` is set when it ends). */
export const httpServerAttributes = (method: string, route: string, path: string): SpanAttributes => ({
  [ATTR_HTTP_REQUEST_METHOD]: method,
  [ATTR_HTTP_ROUTE]: route,
  [ATTR_URL_PATH]: path,
});

/**
 * `messagingSpan` of a subject, built once per subject and operation: a request and its handling
 * take a span each on the hottest paths, and their names and attributes never change. Bounded
 * (instance subjects come and go with lifecycle pods): past the bound it starts afresh.
 */
const built = {
  send: new Map<string, { name: string; attributes: SpanAttributes }>(),
  process: new Map<string, { name: string; attributes: SpanAttributes }>(),
};
const MAX_BUILT = 4_096;
export function messagingSpanOf(operation: 'send' | 'process', subject: string, template: string): { name: string; attributes: SpanAttributes } {
  const cache = built[operation];
  let span = cache.get(subject);
  if (!span) {
    if (cache.size >= MAX_BUILT) cache.clear();
    span = messagingSpan(operation, subject, template);
    cache.set(subject, span);
  }
  return span;
}
