import type { McpMode } from '@kandev/contracts';
import { askUserQuestionsTool } from './ask-user-questions.js';
import { createTaskTool } from './create-task.js';
import { getTaskConversationTool } from './get-task-conversation.js';
import { listTasksTool } from './list-tasks.js';
import { messageTaskTool } from './message-task.js';
import { spawnSessionTool } from './spawn-session.js';
import { stopTaskTool } from './stop-task.js';
import type { Tool } from './tool.js';
import { whoamiTool } from './whoami.js';

export type { Tool, ToolContext } from './tool.js';

/**
 * Every tool the server knows; each declares the modes it belongs to. A new tool is one file
 * under src/tools/ plus its line here.
 */
const ALL_TOOLS: readonly Tool[] = [
  messageTaskTool,
  stopTaskTool,
  createTaskTool,
  askUserQuestionsTool,
  listTasksTool,
  getTaskConversationTool,
  spawnSessionTool,
  whoamiTool,
];

const byMode = new Map<McpMode, ReadonlyMap<string, Tool>>();
/** The tools a token of this mode may list and call, by name. */
export function toolsFor(mode: McpMode): ReadonlyMap<string, Tool> {
  let tools = byMode.get(mode);
  if (!tools) {
    tools = new Map(ALL_TOOLS.filter((t) => t.modes.includes(mode)).map((t) => [t.name, t]));
    byMode.set(mode, tools);
  }
  return tools;
}
