import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DrainReport } from '@kandev/contracts';
import { assertInvariants, eventually, repoRoot } from '@kandev/testkit';
import { makeTask, sleepScript, startWorld, type World } from './support.js';

/**
 * The rollout drain (docs/operations.md, "Rolling out lifecycle") end to end, with two lifecycle
 * processes and scripted agents: the drain command, as a preStop hook runs it, makes its instance
 * take no more launches (they go to the other one), stops what still runs after its wait through
 * the teardown, and the sessions end settled (no agent left, invariants hold).
 */
const TEARDOWN_GRACE_MS = 500;
const DRAIN_WAIT_MS = 8_000;
const drainCli = join(repoRoot, 'services/lifecycle/dist/drain.bundle.js');

let w: World;
beforeAll(async () => {
  w = await startWorld({ TEARDOWN_GRACE_MS: String(TEARDOWN_GRACE_MS) });
  await w.stack.addReplica('lifecycle');
});
afterAll(async () => w?.stop());

interface ExecView {
  execution_id: string;
  session_id: string;
  pid: number | null;
  status: string;
  instance_id: string;
}

/** The live execution of a task's session once its agent runs. */
async function runningExecution(taskId: string, sessionId: string): Promise<ExecView> {
  return eventually(async () => {
    const list = (await w.api.get(`/tasks/${taskId}/executions`)).body as ExecView[];
    return list.find((x) => x.session_id === sessionId && x.pid && (x.status === 'RUNNING' || x.status === 'READY')) ?? null;
  }, 30_000);
}

async function startLongTurn(workspaceId: string) {
  const { task } = await makeTask(w.api, { workspace_id: workspaceId, title: 'long turn' });
  const s = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: sleepScript(120_000) });
  return { task, sessionId: s.id as string, exec: await runningExecution(task.id, s.id) };
}

/**
 * The drain command a preStop hook runs, with the pod's environment (NATS_URL, INSTANCE_ID, and
 * lifecycle's NATS user and bus key: it drains as lifecycle, ADR 0054/0055).
 */
async function runDrain(instanceId: string, args: string[]): Promise<DrainReport> {
  const { stdout } = await promisify(execFile)(process.execPath, [drainCli, ...args], {
    env: { ...process.env, ...w.stack.busEnv('lifecycle'), NATS_URL: w.stack.nats.url, INSTANCE_ID: instanceId },
    timeout: DRAIN_WAIT_MS + TEARDOWN_GRACE_MS + 30_000,
  });
  return DrainReport.parse(JSON.parse(stdout.trim()));
}

describe('draining a lifecycle instance', () => {
  it('takes no more launches, stops what still runs after its wait, and leaves every session settled', async () => {
    const { id: workspaceId } = await w.api.ok('POST', '/workspaces', { name: 'drain' });
    // Enough long turns that, whichever instance the queue group picks, one of them holds some.
    const running = [];
    for (let i = 0; i < 4; i++) running.push(await startLongTurn(workspaceId));
    const counts = new Map<string, number>();
    for (const r of running) counts.set(r.exec.instance_id, (counts.get(r.exec.instance_id) ?? 0) + 1);
    const drained = [...counts].sort((a, b) => b[1] - a[1])[0]![0];
    const onDrained = running.filter((r) => r.exec.instance_id === drained);
    const others = running.filter((r) => r.exec.instance_id !== drained);
    const drainedProcess = drained === 'lifecycle-1' ? w.stack.services.get('lifecycle')! : w.stack.replicas('lifecycle')[0]!;

    // One of the drained instance's executions is stopped by the operator while the drain waits: it "finished".
    const drain = runDrain(drained, ['--wait-ms', String(DRAIN_WAIT_MS), '--grace-ms', String(TEARDOWN_GRACE_MS)]);
    await eventually(async () => (await fetch(`${drainedProcess.urls.health}/readyz`)).status === 503, 10_000);
    const ready = (await (await fetch(`${drainedProcess.urls.health}/readyz`)).json()) as { status: string; details: Record<string, unknown> };
    expect(ready).toMatchObject({ status: 'not_ready', details: { draining: true } });
    const operatorStopped = onDrained.length > 1 ? onDrained[0] : undefined;
    if (operatorStopped) await w.api.ok('POST', `/tasks/${operatorStopped.task.id}/stop`, { reason: 'done with it' });

    // Launches while it drains all go to the other instance.
    const during = [];
    for (let i = 0; i < 3; i++) during.push(await startLongTurn(workspaceId));
    for (const d of during) expect(d.exec.instance_id).not.toBe(drained);

    const report = await drain;
    expect(report.instance_id).toBe(drained);
    expect(report.mode).toBe('stop');
    expect(report.left).toEqual([]);
    expect(report.waited_ms).toBeGreaterThanOrEqual(DRAIN_WAIT_MS - 50);
    const expectStopped = onDrained.filter((r) => r !== operatorStopped).map((r) => r.exec.execution_id);
    expect([...report.stopped].sort()).toEqual([...expectStopped].sort());
    expect(report.finished).toEqual(operatorStopped ? [operatorStopped.exec.execution_id] : []);

    // A second drain joins the first: same report, nothing more done.
    expect(await runDrain(drained, ['--wait-ms', '0'])).toEqual(report);

    // The drained sessions ended (FAILED, naming the drain); the others still run.
    for (const r of onDrained.filter((x) => x !== operatorStopped)) {
      const s = await eventually(async () => {
        const body = (await w.api.get(`/sessions/${r.sessionId}`)).body as { state: string; error_message: string | null };
        return body.state === 'FAILED' ? body : null;
      }, 10_000);
      expect(s.error_message).toContain('lifecycle_drain');
    }
    for (const r of [...others, ...during]) expect(((await w.api.get(`/sessions/${r.sessionId}`)).body as { state: string }).state).toBe('RUNNING');

    // No agent left behind, no session claiming a process that is gone, every action audited.
    const agentPids = new Map([...running, ...during].map((r) => [r.sessionId, r.exec.pid!]));
    await assertInvariants(w.stack, { agentPids, bounds: { graceMs: TEARDOWN_GRACE_MS + 2_000, reconcileMs: 10_000 }, withinMs: 30_000 });
  });
});
