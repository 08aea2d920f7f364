import type { ErrorBody } from '@kandev/contracts';

/**
 * `mcp.*` actions belong to agents speaking through the mcp service, whose identity is the calling
 * task. An operator socket must never reach them, whatever the case or padding of the name.
 */
export function isMcpAction(action: string): boolean {
  const a = action.trim().toLowerCase();
  return a === 'mcp' || a.startsWith('mcp.');
}

/** The check every WebSocket frame passes before anything is looked up or dispatched. */
export function guardAction(action: string): ErrorBody | null {
  return isMcpAction(action) ? { code: 'FORBIDDEN', message: 'mcp actions are not available to operators' } : null;
}
