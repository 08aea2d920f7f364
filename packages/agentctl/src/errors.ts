import type { AgentctlErrorCode, AgentctlErrorResponse } from '@kandev/contracts/agentctl';

const statusOf: Record<AgentctlErrorCode, number> = {
  BAD_REQUEST: 400,
  UNAUTHORIZED: 401,
  VALIDATION_ERROR: 400,
  NOT_FOUND: 404,
  CONFLICT: 409,
  UNAVAILABLE: 503,
  INTERNAL_ERROR: 500,
};

/** A failure with its wire code; `status` overrides the code's usual HTTP status (the cancel timeout is a 504). */
export class AgentctlError extends Error {
  readonly status: number;
  readonly details: Record<string, unknown> | undefined;

  constructor(
    readonly code: AgentctlErrorCode,
    message: string,
    options: { status?: number; details?: Record<string, unknown> } = {},
  ) {
    super(message);
    this.name = 'AgentctlError';
    this.status = options.status ?? statusOf[code];
    this.details = options.details;
  }

  toBody(): AgentctlErrorResponse {
    return { error: { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) } };
  }
}
