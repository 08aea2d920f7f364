import { existsSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, stubPrompt } from '@kandev/testkit';
import { asking, makeTask, REAL_AGENTS, runningSession, shellTool, reportOnFailure, startRealWorld, type RealWorld } from './support.js';

/**
 * against the published agents: a tool call the agent must ask permission for (Codex: a
 * command that asks to leave the sandbox under approval_policy "on-request"; Claude Code: a Bash
 * call its settings do not allow; Gemini CLI: a shell command in default approval mode) shows up in
 * GET /tasks/:id/permissions; the operator allows it over HTTP, and the command runs.
 */
let w: RealWorld;
reportOnFailure(() => w);
beforeAll(async () => {
  w = await startRealWorld();
});
afterAll(async () => w?.stop());

describe.each(REAL_AGENTS)('a permission request of the published %s agent', (agent) => {
  it('is answered by the operator, and the command it asked for runs', async () => {
    // Where the agent's own uid may write (agents run under a uid of their own when the stack is root).
    const marker = join(tmpdir(), `kandev-allowed-${agent}-${Date.now()}`);
    const { task } = await makeTask(w.api, { agent: asking(agent) });
    const extra = agent === 'codex' ? { sandbox_permissions: 'require_escalated', justification: 'the test asks for approval' } : {};
    const { tool, args } = shellTool(agent, `touch ${marker}`, extra);
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: stubPrompt({ tool, args }, `permission-answer-${agent}`) });
    await runningSession(w.api, session.id);
    const pending = await eventually(
      async () => {
        const list = (await w.api.get(`/tasks/${task.id}/permissions`)).body as Array<Record<string, any>>;
        return list.find((p) => p.status === 'pending') ?? null;
      },
      60_000,
      200,
    );
    expect(pending.session_id).toBe(session.id);
    expect(existsSync(marker)).toBe(false);

    const allow = (pending.options as Array<{ option_id: string; kind: string }>).find((o) => o.kind === 'allow_once');
    expect(allow).toBeDefined();
    const res = await w.api.post(`/permissions/${pending.id}/respond`, { option_id: allow!.option_id });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: pending.id, status: 'answered', chosen_option_id: allow!.option_id });

    await eventually(async () => existsSync(marker), 60_000, 100);
    const s = await eventually(async () => {
      const b = (await w.api.get(`/sessions/${session.id}`)).body;
      return b.turns[0]?.completed_at ? b : null;
    }, 60_000);
    expect(s.turns[0].stop_reason).toBe('end_turn');
    expect((await w.api.get(`/tasks/${task.id}/permissions`)).body.find((p: { id: string }) => p.id === pending.id)).toMatchObject({ status: 'answered' });
    rmSync(marker, { force: true });
  });
});
