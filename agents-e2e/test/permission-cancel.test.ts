import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, processAlive, stubPrompt } from '@kandev/testkit';
import { asking, makeTask, REAL_AGENTS, runningSession, shellTool, reportOnFailure, startRealWorld, type RealWorld } from './support.js';

/**
 * against the published agents: an agent waiting on a permission request (Codex: an approval
 * under approval_policy "on-request" for a command that asks to leave the sandbox; Claude Code: a
 * Bash call its settings do not allow) has it answered `cancelled` when the turn is cancelled, and
 * the command never runs.
 */
let w: RealWorld;
reportOnFailure(() => w);
beforeAll(async () => {
  w = await startRealWorld();
});
afterAll(async () => w?.stop());

/** lifecycle's relay of agentctl's permission events for one session (its structured log). */
const permissionLog = (sessionId: string) =>
  w.logs.filter((l) => l.service === 'lifecycle' && l.line.msg === 'agent permission' && l.line.session_id === sessionId).map((l) => l.line);

describe.each(REAL_AGENTS)('a permission request of the published %s agent', (agent) => {
  it('is answered cancelled when the turn is cancelled, and the command does not run', async () => {
    // Somewhere the agent's uid could write, so the check below would see the command had run.
    const marker = join(tmpdir(), `kandev-approved-${agent}-${Date.now()}`);
    const { task } = await makeTask(w.api, { agent: asking(agent) });
    const extra = agent === 'codex' ? { sandbox_permissions: 'require_escalated', justification: 'the test asks for approval' } : {};
    const { tool, args } = shellTool(agent, `touch ${marker}`, extra);
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: stubPrompt({ tool, args }, `permission-${agent}`) });
    const pid = (await runningSession(w.api, session.id)).execution.pid as number;
    const requested = await eventually(async () => permissionLog(session.id).find((l) => l.event === 'permission_requested'), 60_000, 100);

    const res = await w.api.post(`/sessions/${session.id}/cancel`);
    expect(res).toEqual({ status: 200, body: { success: true, session_id: session.id } });
    const resolved = await eventually(async () => permissionLog(session.id).find((l) => l.event === 'permission_resolved'), 10_000);
    expect(resolved).toMatchObject({ permission_id: requested.permission_id, outcome: 'cancelled' });

    const s = await eventually(async () => {
      const b = (await w.api.get(`/sessions/${session.id}`)).body;
      return b.turns[0]?.completed_at ? b : null;
    }, 30_000);
    expect(s.turns[0].stop_reason).toBe('cancelled');
    expect(s.state).toBe('WAITING_FOR_INPUT');
    expect(s.execution).toMatchObject({ status: 'READY', pid });
    expect(processAlive(pid)).toBe(true);
    expect(existsSync(marker)).toBe(false);
  });
});
