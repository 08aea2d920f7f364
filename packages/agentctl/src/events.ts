import { AgentctlEvent } from '@kandev/contracts/agentctl';
import type { Logger } from './log.js';

/*
 * The NDJSON event stream on stdout, read by the parent (the lifecycle service). Every line is
 * validated against its contract before it is written: a line that does not parse on the other side
 * would be lost silently there, so a mismatch is a bug to surface here, in the log.
 */
export class EventStream {
  private broken = false;

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly log: Logger,
  ) {
    // A parent that went away must not crash agentctl while it tears its agent down.
    out.on('error', (err: Error) => {
      this.broken = true;
      log.warn({ err: err.message }, 'event stream closed');
    });
  }

  emit(event: AgentctlEvent): void {
    const parsed = AgentctlEvent.safeParse(event);
    if (!parsed.success) {
      this.log.error({ type: event.type, issues: parsed.error.issues }, 'event does not match its contract; dropped');
      return;
    }
    if (this.broken) return;
    this.out.write(`${JSON.stringify(parsed.data)}\n`);
  }

  /** Resolves once everything written so far has been handed to the OS. */
  flush(): Promise<void> {
    if (this.broken) return Promise.resolve();
    return new Promise((resolve) => {
      this.out.write('', () => resolve());
    });
  }
}
