import { conflict, unavailable, type KandevError } from '@kandev/contracts';

/*
 * How a launch that got as far as spawning agentctl ends when it does not end running (B-1,
 * The pipeline (flows/launch.ts) is spawn → ready → admit → first prompt; whatever goes
 * wrong on the way, or a stop that lands meanwhile, is one of these, and `abandonLaunch` says how
 * it is cleaned up and answered.
 */

export type LaunchFailure =
  /** agentctl or its agent did not come up (exited, or no `ready` within the launch timeout). */
  | { step: 'ready'; cause: unknown }
  /** B-1: the orchestrator refused the launch under the task's fence, or could not be asked. */
  | { step: 'admit'; refusal: string }
  /** The agent did not take the first prompt; `cause` is already the answer to give. */
  | { step: 'first_prompt'; cause: unknown }
  /** A stop for this execution landed between two steps. */
  | { step: 'stopped' }
  /** A defect on the way (nothing above): torn down all the same, the error passed on. */
  | { step: 'unexpected'; cause: unknown };

export interface LaunchAbandon {
  /** The teardown that removes what was spawned; a stop's own teardown, when one runs, is joined instead. */
  teardown: { reason: string; graceful: boolean };
  /** The one log line of the failed launch. */
  log: { level: 'info' | 'warn' | 'error'; message: string };
  /** The launch's answer. */
  answer: KandevError | { rethrow: unknown };
}

const STOPPED = 'execution was stopped while launching';

/**
 * A stop that landed meanwhile explains a failure to come up (the stop killed agentctl) and a
 * stop between steps; a fence refusal or a prompt error says more than that and is the answer
 * even then. An agent that never came up is removed without grace: there is nothing to end
 * cleanly. Otherwise the agent gets the usual grace.
 */
export function abandonLaunch(f: LaunchFailure, stoppedMeanwhile: boolean, executionId: string): LaunchAbandon {
  const stopped = () => conflict(STOPPED, { execution_id: executionId });
  switch (f.step) {
    case 'stopped':
      return { teardown: { reason: 'launch_stopped', graceful: true }, log: { level: 'info', message: STOPPED }, answer: stopped() };
    case 'ready':
      return {
        teardown: { reason: 'launch_failed', graceful: false },
        log: { level: stoppedMeanwhile ? 'info' : 'warn', message: stoppedMeanwhile ? STOPPED : 'agent failed to start; tearing down' },
        answer: stoppedMeanwhile ? stopped() : unavailable(`agent failed to start: ${messageOf(f.cause)}`, f.cause),
      };
    case 'admit': {
      const reason = `launch fenced: ${f.refusal}`;
      return {
        teardown: { reason, graceful: true },
        log: { level: 'warn', message: 'launch refused by the fence; tearing down' },
        answer: conflict(reason, { execution_id: executionId }),
      };
    }
    case 'first_prompt':
      return {
        teardown: { reason: 'first_prompt_failed', graceful: true },
        log: { level: 'error', message: 'first prompt failed; tearing down' },
        answer: { rethrow: f.cause },
      };
    case 'unexpected':
      return {
        teardown: { reason: 'launch_failed', graceful: true },
        log: { level: 'error', message: 'launch failed; tearing down' },
        answer: { rethrow: f.cause },
      };
  }
}

function messageOf(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
