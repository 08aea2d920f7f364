import { isKandevError, LifePermission, type RequestOf } from '@kandev/contracts';
import { request, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cancelAt, EventLog, FakeOrchestrator, launch, launchRequest, natsClient, promptAt, script, startLifecycle, tmpStateDir } from './helpers.js';

/**
 * at the lifecycle: agentctl's permission lines become `agent.permission_*` events, and
 * `life.<instance>.exec.permission.respond` carries the operator's answer to the agentctl that owns
 * the execution, which hands it to the waiting agent (both protocols). An answer to a request a
 * turn cancel already settled is CONFLICT with how it ended.
 */
describe('permission requests (R-8.3)', () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  let events: EventLog;
  const stateDir = tmpStateDir();

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'permissions-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    life = await startLifecycle(nats.url, 'life-a', stateDir);
  });
  afterAll(async () => {
    await life?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  const respond = (req: RequestOf<typeof LifePermission.respond>) => request(nc, LifePermission.respond.at('life-a'), req, { timeoutMs: 10_000 });

  async function asking(agent: 'scripted-acp' | 'scripted-codex', text: string) {
    const exec = await launch(nc, launchRequest({ agent }));
    const turnId = randomUUID();
    await promptAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId, prompt: script([{ permission: text }]) });
    const asked = await events.waitFor('agent.permission_requested', (e) => e.data.execution_id === exec.execution_id);
    return { exec, turnId, asked };
  }

  it.each(['scripted-acp', 'scripted-codex'] as const)('%s: relays the request, and the answer reaches the waiting agent', async (agent) => {
    const { exec, turnId, asked } = await asking(agent, 'run ls?');
    expect(asked.data).toMatchObject({ turn_id: turnId, title: 'run ls?' });
    expect(asked.session_id).toBe(exec.session_id);
    const allow = asked.data.options.find((o) => o.kind === 'allow_once')!;
    const answer = await respond({ execution_id: exec.execution_id, permission_id: asked.data.permission_id, option_id: allow.option_id });
    expect(answer).toEqual({ permission_id: asked.data.permission_id, outcome: 'allowed', option_id: allow.option_id });
    const resolved = await events.waitFor('agent.permission_resolved', (e) => e.data.permission_id === asked.data.permission_id);
    expect(resolved.data).toMatchObject({ outcome: 'allowed', option_id: allow.option_id, asked: { title: 'run ls?' } });
    // The agent carried on with what it was given.
    const said = await events.waitFor('agent.message', (e) => e.data.turn_id === turnId && e.data.text.startsWith('permission:'));
    expect(said.data.text).toBe(`permission: ${allow.option_id}`);
    expect((await events.waitFor('turn.completed', (e) => e.data.turn_id === turnId)).data.stop_reason).toBe('end_turn');
  });

  it.each(['scripted-acp', 'scripted-codex'] as const)(
    '%s: an answer after a turn cancel settled the request is CONFLICT saying it was cancelled',
    async (agent) => {
      const { exec, turnId, asked } = await asking(agent, 'push?');
      await cancelAt(nc, 'life-a', { execution_id: exec.execution_id, turn_id: turnId });
      const resolved = await events.waitFor('agent.permission_resolved', (e) => e.data.permission_id === asked.data.permission_id);
      expect(resolved.data).toMatchObject({ outcome: 'cancelled', option_id: null });
      const late = await respond({
        execution_id: exec.execution_id,
        permission_id: asked.data.permission_id,
        option_id: asked.data.options[0]!.option_id,
      }).catch((e: unknown) => e);
      expect(isKandevError(late) && late.code).toBe('CONFLICT');
      expect(isKandevError(late) && late.details).toMatchObject({ outcome: 'cancelled', option_id: null });
      const unknown = await respond({ execution_id: exec.execution_id, permission_id: 'never-asked', cancelled: true }).catch((e: unknown) => e);
      expect(isKandevError(unknown) && unknown.code).toBe('NOT_FOUND');
    },
  );
});
