import type { McpMode } from '@kandev/contracts';
import type { AgentClaims, NatsConnection } from '@kandev/runtime';
import type { ToolAnnotations } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

/** What a tool knows about the call beyond its arguments. `caller` is the verified token. */
export interface ToolContext {
  readonly nc: NatsConnection;
  readonly caller: AgentClaims;
  /** The caller's raw token: every orchestrator request carries it as `agent_token`. */
  readonly callerToken: string;
  readonly requestId: string;
  readonly requestTimeoutMs: number;
  /** Aborts when the caller cancels this call (`notifications/cancelled`) or its HTTP connection closes. */
  readonly signal: AbortSignal;
}

export interface ToolSpec<Shape extends z.ZodRawShape> {
  name: string;
  title: string;
  description: string;
  /** The MCP modes (token `mode`) that list and accept this tool. */
  modes: readonly McpMode[];
  /** Input as a zod shape: advertised as JSON Schema, and the only keys a call can pass on. */
  input: Shape;
  annotations: ToolAnnotations;
  /** Runs with validated arguments (unknown keys already dropped); returns the result object. */
  run(args: z.infer<z.ZodObject<Shape>>, ctx: ToolContext): Promise<Record<string, unknown>>;
}

export interface Tool<Shape extends z.ZodRawShape = z.ZodRawShape> extends ToolSpec<Shape> {
  /** `z.object(input)`: parsing strips every key the shape does not name. */
  readonly schema: z.ZodObject<Shape>;
  readonly inputJsonSchema: { type: 'object'; [k: string]: unknown };
}

export function defineTool<Shape extends z.ZodRawShape>(spec: ToolSpec<Shape>): Tool<Shape> {
  const schema = z.object(spec.input);
  const { $schema: _ignored, ...json } = z.toJSONSchema(schema, { io: 'input' }) as Record<string, unknown>;
  return { ...spec, schema, inputJsonSchema: { ...json, type: 'object' } };
}
