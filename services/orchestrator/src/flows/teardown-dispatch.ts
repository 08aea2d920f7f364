import { internalError, KandevError, Life, MAX_STOPS_PER_REQUEST, type ResultOf } from '@kandev/contracts';
import { isNoResponders, request, type Logger } from '@kandev/runtime';
import type { StopReason, Teardown } from '../domain/stop.js';
import { recordAudit, type AuditRecord } from '../store/audit.js';
import type { CallContext, OrchRuntime } from './context.js';

/**
 * The effect half of the one stop pipeline (flows/stop.ts), after commit: each captured execution
 * is named to its owner instance for graceful teardown (B-2). Teardown itself is asynchronous; a
 * request that fails or never leaves (a crash right after commit) is made good by the reconciler,
 * which re-stops CANCELLED sessions whose process lives on.
 */

export interface TeardownOutcome {
  teardown: Teardown;
  /** The owner accepted it, or the execution was already gone. */
  reached: boolean;
  error: unknown;
}

/** Ask the owner instance to tear one captured execution down; resolves once accepted (teardown is asynchronous). */
export async function scheduleTeardown(
  rt: OrchRuntime,
  call: CallContext,
  execution: { execution_id: string; instance_id: string },
  reason: string,
  orphaned = false,
) {
  return request(rt.nc, Life.stop.at(execution.instance_id), { execution_id: execution.execution_id, reason, orphaned }, { requestId: call.requestId });
}

type StopResult = ResultOf<typeof Life.stop>;

/**
 * Every teardown sent to its owner at once, settled in the order given: one `exec.stop_many` per
 * owner instance with several (a tree hold's sessions), `exec.stop` for one alone. A hundred
 * requests cost the orchestrator and the lifecycle a validation, a span and a reply each, on the
 * cores the hold's reply waits for. An owner that does not answer `stop_many` (gone, or a version
 * without it) is asked per execution, so each outcome says what it says for a single stop.
 */
async function stopAtOwners(rt: OrchRuntime, call: CallContext, teardowns: readonly Teardown[], reason: string): Promise<PromiseSettledResult<StopResult>[]> {
  const out: PromiseSettledResult<StopResult>[] = new Array(teardowns.length);
  const one = async (i: number): Promise<void> => {
    const t = teardowns[i]!;
    try {
      out[i] = { status: 'fulfilled', value: await scheduleTeardown(rt, call, t.execution, reason, t.orphaned) };
    } catch (e) {
      out[i] = { status: 'rejected', reason: e };
    }
  };
  const byOwner = new Map<string, number[]>();
  teardowns.forEach((t, i) => byOwner.set(t.execution.instance_id, [...(byOwner.get(t.execution.instance_id) ?? []), i]));
  await Promise.all(
    [...byOwner].map(async ([owner, indices]) => {
      if (indices.length === 1) return one(indices[0]!);
      for (let c = 0; c < indices.length; c += MAX_STOPS_PER_REQUEST) {
        const chunk = indices.slice(c, c + MAX_STOPS_PER_REQUEST);
        const stops = chunk.map((i) => ({ execution_id: teardowns[i]!.execution.execution_id, reason, orphaned: teardowns[i]!.orphaned }));
        let results;
        try {
          ({ results } = await request(rt.nc, Life.stopMany.at(owner), { stops }, { requestId: call.requestId }));
        } catch (e) {
          if (isNoResponders(e)) await Promise.all(chunk.map(one));
          else for (const i of chunk) out[i] = { status: 'rejected', reason: e };
          continue;
        }
        chunk.forEach((i, k) => {
          const r = results[k];
          if (!r) out[i] = { status: 'rejected', reason: internalError(`${Life.stopMany.name}: no result for execution ${stops[k]!.execution_id}`) };
          else if ('error' in r) out[i] = { status: 'rejected', reason: KandevError.from(r.error) };
          else out[i] = { status: 'fulfilled', value: r };
        });
      }
    }),
  );
  return out;
}

/**
 * The effect half: every captured execution goes to its owner at once; outcomes are logged with
 * their ids, and those whose request failed are named in one audit row (B-3, `failure`):
 * the decision stands and the reconciler retries them.
 */
export async function dispatchTeardowns(
  rt: OrchRuntime,
  call: CallContext,
  teardowns: readonly Teardown[],
  reason: StopReason,
  log: Logger,
  failure: (details: Record<string, unknown>) => AuditRecord,
): Promise<TeardownOutcome[]> {
  const settled = await stopAtOwners(rt, call, teardowns, reason);
  const outcomes = settled.map((r, i): TeardownOutcome => {
    const teardown = teardowns[i]!;
    const ids = { session_id: teardown.execution.session_id, execution_id: teardown.execution.execution_id, instance_id: teardown.execution.instance_id };
    if (r.status === 'rejected' && isNoResponders(r.reason)) {
      // No instance serves the owner's subject: the owner is not running, and its processes went
      // with it (agents exit with their instance, B-4; a restarted instance reaps what it left,
      // ADR 0005). Its registry entries outlive it by up to the TTL, so a listed execution is no
      // proof of life. Should the owner only be disconnected, it re-admits on reconnect what is
      // still wanted, and this stop has already made the session unwanted; the reconciler re-stops
      // a CANCELLED session whose process shows up live. Not a failure of this stop.
      const how = teardown.execution.listed ? 'listed, its entry not yet expired' : 'unlisted';
      log[teardown.execution.listed ? 'warn' : 'info']({ ...ids, how }, 'the owner instance of the execution is not running; nothing left to tear down');
      return { teardown, reached: false, error: null };
    }
    if (r.status === 'rejected') {
      log.error({ err: r.reason, ...ids, orphaned: teardown.orphaned }, 'teardown request failed; the reconciler retries it');
      return { teardown, reached: false, error: r.reason };
    }
    if (teardown.orphaned) log.warn({ ...ids }, 'orphaned execution reached through the registry; teardown scheduled');
    else log.info({ ...ids }, 'session stopped; teardown scheduled');
    return { teardown, reached: r.value.accepted || r.value.already_gone, error: null };
  });
  const failed = outcomes.filter((o) => o.error);
  if (failed.length) {
    await recordAudit(rt.sql, failure({ stage: 'teardown', failed: failed.map((o) => o.teardown.execution.execution_id) })).catch((err: unknown) =>
      log.warn({ err }, 'audit write failed'),
    );
  }
  return outcomes;
}
