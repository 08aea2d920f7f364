import { Life } from '@kandev/contracts';
import { request, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { natsClient, startLifecycle, tmpStateDir } from './helpers.js';

/** life.agent.list: what the orchestrator checks a session start against before writing anything. */
let nats: TestNats;
let nc: NatsConnection;
let life: RunningService;
const stateDir = tmpStateDir();

beforeAll(async () => {
  nats = await startNats();
  nc = await natsClient(nats.url, 'agents-test');
  life = await startLifecycle(nats.url, 'life-agents', stateDir);
});
afterAll(async () => {
  await life?.stop();
  await nc?.close();
  await nats?.stop();
  rmSync(stateDir, { recursive: true, force: true });
});

it('lists the agents a launch would accept (the same catalogue as resolveAgent), sorted', async () => {
  const { agents } = await request(nc, Life.agents, {});
  expect(agents).toEqual(expect.arrayContaining(['scripted-acp', 'scripted-codex']));
  expect(agents).not.toContain('no-such-agent');
  expect(agents).toEqual([...agents].sort());
});
