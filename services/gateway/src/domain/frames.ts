import type { ErrorBody } from '@kandev/contracts';
import { guardAction } from './action-guard.js';
import { depthError } from './body.js';

/** Frame ids are echoed back exactly as the client sent them. */
export type FrameId = string | number | null;

export interface RequestFrame {
  id: FrameId;
  action: string;
  payload: unknown;
  /** Optional W3C trace context a client may attach to a frame (an extension of the pinned shape). */
  traceparent: string | null;
}
export interface ResponseFrame {
  id: FrameId;
  type: 'response';
  action: string;
  payload: unknown;
}
export interface ErrorFrame {
  id: FrameId;
  type: 'error';
  action: string | null;
  payload: ErrorBody;
}
export interface NotificationFrame {
  type: 'notification';
  action: string;
  payload: Record<string, unknown>;
}

export type ParsedFrame = { ok: true; frame: RequestFrame } | { ok: false; error: ErrorFrame };

export const responseFrame = (id: FrameId, action: string, payload: unknown): ResponseFrame => ({ id, type: 'response', action, payload });
export const errorFrame = (id: FrameId, action: string | null, error: ErrorBody): ErrorFrame => ({ id, type: 'error', action, payload: error });

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Text of one client frame → a request, or the error frame to answer with. The `mcp.*` guard runs
 * as soon as an action name is readable, before the rest of the envelope is even checked, so a
 * forbidden action can never slip through on a malformed-but-dispatchable frame.
 */
export function parseClientFrame(text: string): ParsedFrame {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return { ok: false, error: errorFrame(null, null, { code: 'BAD_REQUEST', message: 'frame is not JSON' }) };
  }
  if (!isRecord(raw)) return { ok: false, error: errorFrame(null, null, { code: 'BAD_REQUEST', message: 'frame must be a JSON object' }) };
  const id: FrameId = typeof raw.id === 'string' || typeof raw.id === 'number' ? raw.id : null;
  const action = typeof raw.action === 'string' ? raw.action : null;
  if (action !== null) {
    const denied = guardAction(action);
    if (denied) return { ok: false, error: errorFrame(id, action, denied) };
  }
  // Nesting is bounded before anything walks the frame (validation, logs and JSON.stringify recurse;
  // JSON.parse does not), and after the id, the action and the mcp.* guard are read, so the error
  // answers its request and an mcp.* frame is FORBIDDEN however deep.
  const tooDeep = depthError(text, 'frame');
  if (tooDeep) return { ok: false, error: errorFrame(id, action, tooDeep.toBody()) };
  if (action === null || action.length === 0)
    return { ok: false, error: errorFrame(id, null, { code: 'BAD_REQUEST', message: 'frame needs a string "action"' }) };
  if (raw.type !== 'request') return { ok: false, error: errorFrame(id, action, { code: 'BAD_REQUEST', message: 'frame "type" must be "request"' }) };
  if (id === null) return { ok: false, error: errorFrame(null, action, { code: 'BAD_REQUEST', message: 'frame needs an "id" (string or number)' }) };
  const traceparent = typeof raw.traceparent === 'string' ? raw.traceparent : null;
  return { ok: true, frame: { id, action, payload: raw.payload ?? {}, traceparent } };
}
