import { createLogger, context, type NatsConnection } from '@kandev/runtime';
import { expect, it } from 'vitest';
import { z } from 'zod';
import { callTool } from '../src/tool-call.js';
import { defineTool, type ToolContext } from '../src/tools/tool.js';

it('hands the tool the verified caller, the raw token, the request id and the timeout', async () => {
  let seen: ToolContext | undefined;
  const echo = defineTool({
    name: 'echo_kandev',
    title: 'Echo',
    description: 'echo',
    modes: ['task'],
    input: { text: z.string() },
    annotations: {},
    async run(args, ctx) {
      seen = ctx;
      return { text: args.text };
    },
  });
  const caller = { task_id: '00000000-0000-4000-8000-000000000001', mode: 'task' as const };
  const nc = {} as NatsConnection;
  const signal = new AbortController().signal;
  const r = await callTool(
    echo,
    'echo_kandev',
    { text: 'hi', extra: 1 },
    { nc, log: createLogger('t', 'silent'), caller, callerToken: 'the.raw.token', requestId: 'r-1', requestTimeoutMs: 1234, trace: context.active(), signal },
  );
  expect(r.structuredContent).toEqual({ text: 'hi' });
  expect(seen).toEqual({ nc, caller, callerToken: 'the.raw.token', requestId: 'r-1', requestTimeoutMs: 1234, signal });
});
