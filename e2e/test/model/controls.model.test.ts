import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectMcp } from '@kandev/testkit';
import { startWorld, type World } from '../support.js';
import { checked, commands, GRACE_MS, type Model, type Real } from './model.js';

/**
 * R-10.7, B-9: the controls as a state machine. fast-check draws random sequences of controls
 * (create child, start, message queued / interrupt, operator stop, MCP stop, turn cancel, tree
 * pause / resume / cancel / restore, wakeup, PATCH status, cost event, kill -9 of an agent), runs
 * each against the real stack through its public API (HTTP, MCP with a coordinator's agent token)
 * and against the reference model of model.ts, and checks the invariants after every step (model.ts
 * names the SPEC rule each one checks: I1 no session on a cancelled or held task, I2 no message lost
 * or delivered twice, I3 no agent past its bound, I4 restored statuses equal the snapshots, I5 every
 * control audited, I6 the fault tests' checker clean, I7 the tree's cost).
 *
 * `npm test`: a fixed seed and a few runs of STEPS controls each (about a minute on a busy 2-core
 * machine), no shrinking (a failure prints its sequence and the seed to replay). With shrinking,
 * sequences are 1 to STEPS long so that fast-check can shorten them. `npm run test:model`: many runs
 * from a random seed (KANDEV_MODEL_RUNS, KANDEV_MODEL_SEED, KANDEV_MODEL_STEPS), shrinking on.
 */
const RUNS = Number(process.env.KANDEV_MODEL_RUNS ?? 6);
const STEPS = Number(process.env.KANDEV_MODEL_STEPS ?? 10);
const SEED = process.env.KANDEV_MODEL_SEED === 'random' ? Date.now() % 2 ** 31 : Number(process.env.KANDEV_MODEL_SEED ?? 54);
const SHRINK = process.env.KANDEV_MODEL_SHRINK === '1';

let w: World;
beforeAll(async () => {
  w = await startWorld({ TEARDOWN_GRACE_MS: String(GRACE_MS), CANCEL_TIMEOUT_MS: '2000' });
});
afterAll(async () => w?.stop());

describe('the controls against their reference model (R-10.7, B-9)', () => {
  it(
    `holds the invariants over ${RUNS} random sequences of ${STEPS} controls (seed ${SEED})`,
    async () => {
      const ws = await w.api.ok('POST', '/workspaces', { name: 'model' });
      let lastTrace: string[] = [];
      const property = fc.asyncProperty(
        fc.array(fc.oneof(...commands.map((a) => a.map(checked))), { minLength: SHRINK ? 1 : STEPS, maxLength: STEPS }),
        async (cmds) => {
          // Each run: a coordinator task of its own (never controlled itself), its MCP client.
          const root = await w.api.ok('POST', '/tasks', { workspace_id: ws.id, title: 'coordinator' });
          const mcp = await connectMcp(w.stack.mcpUrl, await w.stack.agentToken(root.id));
          const model: Model = { rootId: root.id, children: [], costCents: 0 };
          const real: Real = { w, mcp, agentPids: new Map(), trace: [] };
          lastTrace = real.trace;
          // Two children to begin with (createChild adds a third).
          for (const title of ['child-a', 'child-b']) {
            const t = await w.api.ok('POST', '/tasks', { workspace_id: ws.id, parent_id: root.id, title });
            model.children.push({ id: t.id, status: 'TODO', hold: null, live: null, messages: [] });
          }
          try {
            await fc.asyncModelRun(() => ({ model, real }), cmds);
          } finally {
            console.info(`[model] run: ${real.trace.join(' → ') || '(nothing ran)'}`);
            await mcp.close().catch(() => undefined);
            // Leave no agent running into the next run.
            for (const c of model.children) if (c.live) await w.api.post(`/tasks/${c.id}/stop`, {});
          }
        },
      );
      const out = await fc.check(property, { seed: SEED, numRuns: RUNS, endOnFailure: !SHRINK, verbose: 1 });
      if (out.failed)
        console.error(
          `[model] failed; the last run (step ${lastTrace.length}): ${lastTrace.join(' → ')}\n  ${String(out.errorInstance)}\n${fc.defaultReportMessage(out)}`,
        );
      expect(out.failed, out.failed ? (fc.defaultReportMessage(out) ?? '') : '').toBe(false);
    },
    Math.max(300_000, RUNS * STEPS * 30_000),
  );
});
