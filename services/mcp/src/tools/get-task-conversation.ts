import { ConversationLimits, OrchMcpCoord } from '@kandev/contracts';
import { request } from '@kandev/runtime';
import { z } from 'zod';
import { CONVERSATION_WHEN } from '../domain/guidance.js';
import { defineTool } from './tool.js';

/** a page of a direct child's transcript (its latest session). */
export const getTaskConversationTool = defineTool({
  name: 'get_task_conversation_kandev',
  title: "Read a child task's conversation",
  description: [
    "Read the conversation of one of your direct child tasks (its latest session): prompts, the agent's text, tool calls and results, oldest first. " +
      'Returns {"task_id", "session_id", "items": [{"seq", "role", "kind", "text", "created_at"}], "next_seq"}. ' +
      `Pages hold at most ${ConversationLimits.maxItems} items and ${ConversationLimits.maxBytes / 1024} KiB of text (an item cut to fit says "truncated": true); ` +
      'pass next_seq as after_seq for the next page; next_seq null means you have read to the end.',
    CONVERSATION_WHEN,
  ].join('\n\n'),
  modes: ['task'],
  input: {
    task_id: z.uuid().describe('Full UUID of the direct child task.'),
    after_seq: z.number().int().nonnegative().optional().describe("Read items after this seq (the previous page's next_seq); default: from the start."),
    limit: z.number().int().min(1).optional().describe(`Items per page (default ${ConversationLimits.defaultItems}, at most ${ConversationLimits.maxItems}).`),
  },
  annotations: { title: "Read a child task's conversation", readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async run(args, ctx) {
    return request(
      ctx.nc,
      OrchMcpCoord.childConversation,
      {
        caller_task_id: ctx.caller.task_id,
        agent_token: ctx.callerToken,
        task_id: args.task_id,
        ...(args.after_seq !== undefined ? { after_seq: args.after_seq } : {}),
        ...(args.limit !== undefined ? { limit: args.limit } : {}),
      },
      { requestId: ctx.requestId, timeoutMs: ctx.requestTimeoutMs },
    );
  },
});
