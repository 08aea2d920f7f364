import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Orch, OrchMcp } from '@kandev/contracts';
import { EventPublisher, request } from '@kandev/runtime';
import { agentToken, LIFECYCLE_PROMPT_WAIT_MS, operator, startHarness, type Harness } from './harness.js';

const until = async (fn: () => Promise<boolean>, ms = 5000) => {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 25));
  }
};

/** message_task_kandev: queued, interrupt, idle delivery, bounds. */
describe('orch.mcp.message_task', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(async () => h?.stop());

  async function pair() {
    const ws = await h.workspace();
    const parent = await h.task(ws.id, 'parent');
    const child = await h.task(ws.id, 'child', parent.id);
    return { ws, parent, child };
  }
  const execOf = (sessionId: string) => [...h.life.registry.values()].find((e) => e.session_id === sessionId)!;

  it('starts a session for a child with nothing running (started)', async () => {
    const { parent, child } = await pair();
    const res = await h.message(parent.id, child.id, 'do it');
    expect(res.status).toBe('started');
    const t = await h.getTask(child.id);
    expect(t.sessions.map((s) => s.id)).toEqual([res.session_id]);
    expect(h.life.prompts.at(-1)!.prompt).toBe('do it'); // exactly what the sender wrote
    expect(h.life.prompts.at(-1)!.context).toContain(parent.id); // sender attribution, as its own block
  });

  it('queues behind a running turn, FIFO, and delivers when the turn ends', async () => {
    const { ws, parent, child } = await pair();
    const s = await h.startSession(child.id, 'long work');
    expect((await h.message(parent.id, child.id, 'first')).status).toBe('queued');
    expect((await h.message(parent.id, child.id, 'second')).status).toBe('queued');
    const queue = await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id });
    expect(queue.map((m) => m.prompt)).toEqual(['first', 'second']);
    expect(queue[0]!.sender_task_id).toBe(parent.id);
    // The turn ends: the oldest message is delivered.
    const e = execOf(s.id);
    const turn = e.turn_id!;
    e.status = 'READY';
    e.turn_id = null;
    await new EventPublisher(h.nc).emit(
      'turn.completed',
      { workspace_id: ws.id, task_id: child.id, session_id: s.id },
      { execution_id: e.execution_id, turn_id: turn, stop_reason: 'end_turn' },
    );
    await until(async () => (await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id })).length === 1);
    expect(h.life.prompts.at(-1)).toMatchObject({ prompt: 'first', context: expect.stringContaining(parent.id) });
    const detail = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id });
    expect(detail.state).toBe('RUNNING');
    expect(detail.turns).toHaveLength(2);
    expect(detail.turns[0]!.stop_reason).toBe('end_turn');
  });

  it('interrupts a running turn and dispatches exactly this message (sent)', async () => {
    const { parent, child } = await pair();
    const s = await h.startSession(child.id, 'wrong approach');
    await h.message(parent.id, child.id, 'queued earlier');
    const res = await h.message(parent.id, child.id, 'change course now', 'interrupt');
    expect(res).toMatchObject({ status: 'sent', session_id: s.id });
    expect(h.life.cancels.at(-1)!.execution_id).toBe(execOf(s.id).execution_id);
    expect(h.life.prompts.at(-1)!.prompt).toBe('change course now');
    const queue = await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id });
    expect(queue.map((m) => m.prompt)).toEqual(['queued earlier']);
    const detail = await request(h.nc, Orch.sessionGet, { actor: operator, session_id: s.id });
    expect(detail.turns.map((t) => t.stop_reason)).toEqual(['cancelled', null]);
    // the interrupted turn is reported cancelled, staged with the writes that closed it.
    const staged = await h.sql<
      { data: unknown }[]
    >`SELECT payload->'data' AS data FROM orchestrator.outbox WHERE payload->>'type' = 'session.agent.cancelled' AND payload->>'session_id' = ${s.id}`;
    expect(staged.map((r) => r.data)).toEqual([{ execution_id: execOf(s.id).execution_id, turn_id: detail.turns[0]!.id, stop_reason: 'cancelled' }]);
  });

  it('keeps an interrupt queued when the cancel cannot land (queued, not an error)', async () => {
    const { parent, child } = await pair();
    await h.startSession(child.id, 'stubborn');
    h.life.cancelBehaviour = 'timeout';
    try {
      const res = await h.message(parent.id, child.id, 'stop that', 'interrupt');
      expect(res.status).toBe('queued');
    } finally {
      h.life.cancelBehaviour = 'cancel';
    }
    const queue = await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id });
    expect(queue).toHaveLength(1);
  });

  it("an owner that took the cancel and never answers the new turn's prompt (it died in between) holds the session for LIFECYCLE_PROMPT_WAIT_MS, not the caller's deadline", async () => {
    const { parent, child } = await pair();
    await h.startSession(child.id, 'working');
    h.life.promptBehaviour = 'hang';
    try {
      const t0 = performance.now();
      const res = await request(
        h.nc,
        OrchMcp.messageTask,
        { caller_task_id: parent.id, agent_token: await agentToken(parent.id), task_id: child.id, prompt: 'change course', delivery_mode: 'interrupt' },
        { timeoutMs: 30_000 },
      );
      const waited = performance.now() - t0;
      // never an error once stored; the dispatch rolled back, so the message waits in the queue.
      expect(res.status).toBe('queued');
      expect(waited).toBeGreaterThanOrEqual(LIFECYCLE_PROMPT_WAIT_MS - 50);
      expect(waited).toBeLessThan(LIFECYCLE_PROMPT_WAIT_MS + 5_000);
      expect((await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id })).map((m) => m.prompt)).toEqual(['change course']);
      // The guard is free again: a stop goes through at once.
      expect((await request(h.nc, Orch.taskStop, { actor: operator, task_id: child.id })).status).toBe('stopped');
    } finally {
      h.life.promptBehaviour = 'accept';
      h.life.releaseHung();
    }
  }, 40_000);

  it('refuses an interrupt from a non-parent with FORBIDDEN and queues nothing', async () => {
    const { ws, child } = await pair();
    const stranger = await h.task(ws.id, 'stranger');
    await h.startSession(child.id, 'work');
    await expect(h.message(stranger.id, child.id, 'hijack', 'interrupt')).rejects.toMatchObject({ code: 'FORBIDDEN' });
    expect(await request(h.nc, Orch.taskQueue, { actor: operator, task_id: child.id })).toEqual([]);
  });

  it('refuses a message across workspaces', async () => {
    const { child } = await pair();
    const other = await h.workspace('other');
    const foreign = await h.task(other.id, 'foreign');
    await expect(h.message(foreign.id, child.id, 'hello')).rejects.toMatchObject({ code: 'FORBIDDEN' });
  });

  it('answers CONFLICT with size and limit when the queue is full', async () => {
    const { parent, child } = await pair();
    await h.startSession(child.id, 'busy');
    for (let i = 0; i < 10; i++) expect((await h.message(parent.id, child.id, `m${i}`)).status).toBe('queued');
    await expect(h.message(parent.id, child.id, 'one too many')).rejects.toMatchObject({ code: 'CONFLICT', details: { size: 10, limit: 10 } });
  });

  it('delivers at once to an idle session (sent)', async () => {
    const { parent, child } = await pair();
    const s = await h.startSession(child.id);
    expect(s.state).toBe('WAITING_FOR_INPUT');
    const res = await h.message(parent.id, child.id, 'you are idle');
    expect(res).toEqual({ task_id: child.id, session_id: s.id, status: 'sent' });
  });
});
