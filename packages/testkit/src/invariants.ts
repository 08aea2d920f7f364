// The system's safety invariants, checked from the outside against a running stack (docs/operations.md). Fault
// tests inject a fault, let the system recover, and then require `assertInvariants` to pass within
// the documented bounds (docs/operations.md "Fault tests").
import { connectNats } from '@kandev/runtime';
import { natsLogin } from './nats.js';
import postgres from 'postgres';
import type { ControlLog, ControlRequest } from './control-requests.js';
import { auditViolations } from './invariants/audit.js';
import { effectsInDatabase, effectsOnStream } from './invariants/effects.js';
import { processViolations, type InvariantBounds } from './invariants/processes.js';
import { requestViolations } from './invariants/requests.js';
import type { Violation } from './invariants/types.js';
import type { Stack } from './stack.js';

export type { InvariantBounds } from './invariants/processes.js';
export type { InvariantName, Violation } from './invariants/types.js';

export interface InvariantReport {
  /** Wrong for longer than the bound allows (or wrong at all, for states written in one transaction). */
  violations: Violation[];
  /** Wrong, but still within the bound: the system may yet fix it. */
  pending: Violation[];
}

export interface InvariantOptions {
  /** Session id → the agent pid the test saw for it. */
  agentPids: ReadonlyMap<string, number>;
  bounds: InvariantBounds;
  /** The control requests the test sent and what their callers were told. */
  requests?: ControlLog | readonly ControlRequest[];
}

/**
 * One pass over the six invariants:
 * 1. no agent process runs for a session that left the active states, beyond the grace bound;
 * 2. no session says STARTING / RUNNING / WAITING_FOR_INPUT without a live execution, beyond the reconcile bound;
 * 3. no task says IN_PROGRESS with no active session, beyond that bound;
 * 4. no event effect is applied twice (invariants/effects.ts);
 * 5. no accepted request is lost without an error to its caller (invariants/requests.ts);
 * 6. every control action has its audit row (invariants/audit.ts).
 * 4–6 read one database snapshot, so an action committing meanwhile is seen whole or not at all.
 */
export async function checkInvariants(stack: Stack, opts: InvariantOptions): Promise<InvariantReport> {
  const sql = postgres(stack.db.url, { max: 1, onnotice: () => undefined });
  const nc = await connectNats({ url: stack.nats.url, name: 'invariant-checker', ...natsLogin(stack.nats) });
  const requests = !opts.requests ? [] : 'requests' in opts.requests ? opts.requests.requests : opts.requests;
  const out: Violation[] = [];
  try {
    out.push(...(await processViolations(sql, nc, opts.agentPids, opts.bounds)));
    out.push(
      ...((await sql.begin('ISOLATION LEVEL REPEATABLE READ READ ONLY', async (tx) => [
        ...(await effectsInDatabase(tx)),
        ...(await requestViolations(tx, requests)),
        ...(await auditViolations(tx)),
      ])) as Violation[]),
    );
    out.push(...(await effectsOnStream(nc)));
  } finally {
    await nc.close().catch(() => undefined);
    await sql.end({ timeout: 2 }).catch(() => undefined);
  }
  const late = (v: Violation) => v.boundMs === null || v.ageMs > v.boundMs;
  return { violations: out.filter(late), pending: out.filter((v) => !late(v)) };
}

/**
 * Poll `checkInvariants` until nothing is wrong any more. Fails at once on a violation (something
 * wrong past its bound), and when `withinMs` (the recovery bound the test claims, with headroom)
 * runs out while something is still pending. Checking early therefore proves nothing by itself:
 * it passes only once every suspect state has been fixed by the system.
 */
export async function assertInvariants(stack: Stack, opts: InvariantOptions & { withinMs: number }): Promise<void> {
  const deadline = Date.now() + opts.withinMs;
  const show = (vs: Violation[]) =>
    vs.map((v) => `  ${v.invariant}: ${v.detail} (${v.boundMs === null ? 'no tolerance' : `bound ${v.boundMs} ms`})`).join('\n');
  for (;;) {
    let report: InvariantReport;
    try {
      report = await checkInvariants(stack, opts);
    } catch (e) {
      // A part of the system not back yet (a registry read with no responder) is not recovered yet.
      if (Date.now() > deadline) throw new Error(`not recovered within ${opts.withinMs} ms: the check itself fails: ${(e as Error).message}`);
      await new Promise((r) => setTimeout(r, 250));
      continue;
    }
    const { violations, pending } = report;
    if (violations.length) throw new Error(`invariants violated:\n${show(violations)}${pending.length ? `\npending:\n${show(pending)}` : ''}`);
    if (pending.length === 0) return;
    if (Date.now() > deadline) throw new Error(`not recovered within ${opts.withinMs} ms:\n${show(pending)}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
