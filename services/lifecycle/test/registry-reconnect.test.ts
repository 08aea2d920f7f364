// ADR 0014: a registry put made while NATS restarts lands once the connection is back. Dropped by
// the client at its next reconnect attempt, it failed only at its 5 s timeout and held up the
// refreshes queued behind it: the entry lapsed while its agent ran on, and a task stop that read
// the bucket then found nothing to tear down (the fault matrix's NATS restart).
import { Buckets } from '@kandev/contracts';
import { connectNats, createLogger, linkOf, RegistryReader, type NatsConnection } from '@kandev/runtime';
import { eventually, startNats, type TestNats } from '@kandev/testkit';
import { Kvm } from '@nats-io/kv';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ExecutionRegistry } from '../src/store/registry.js';
import { executionEntry } from './helpers.js';

let nats: TestNats;
let nc: NatsConnection;

beforeAll(async () => {
  nats = await startNats();
  nc = await connectNats({ url: nats.url, name: 'registry-reconnect-test' });
});
afterAll(async () => {
  await nc?.close();
  await nats?.stop();
});

it('puts an entry written while nats-server is down once the connection is back', async () => {
  const registry = await ExecutionRegistry.open(nc, 30_000, createLogger('test', 'silent'));
  const entry = executionEntry(randomUUID(), 'life-1');
  const restarted = nats.restart(1_000);
  await eventually(async () => !linkOf(nc)!.connected, 5_000, 5);
  await registry.put(entry);
  await restarted;
  const stored = await (await new Kvm(nc).open(Buckets.executions)).get(RegistryReader.key(entry.task_id, entry.execution_id));
  expect(JSON.parse(new TextDecoder().decode(stored!.value)).execution_id).toBe(entry.execution_id);
}, 30_000);
