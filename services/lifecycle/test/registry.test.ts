// registry.readAll: a key that is listed but cannot be read fails the whole list with
// INTERNAL_ERROR. Swallowing it answered [] — a task stop then missed the agent or said NOT_FOUND.
// The fault is real: a nats-server whose `blind` user may list the bucket's keys but not read values.
import { Buckets, Life } from '@kandev/contracts';
import { connectNats, request, type NatsConnection, type RunningService } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { Kvm } from '@nats-io/kv';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executionEntry, startLifecycle, tmpStateDir } from './helpers.js';

let nats: TestNats;
let admin: NatsConnection;
let life: RunningService;

beforeAll(async () => {
  const conf = join(mkdtempSync(join(tmpdir(), 'kandev-nats-conf-')), 'nats.conf');
  writeFileSync(
    conf,
    `listen: "127.0.0.1:-1"
jetstream: {}
authorization {
  users = [
    { user: admin, password: admin }
    { user: blind, password: blind, permissions: { publish: { allow: [">"], deny: ["$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"] } } }
  ]
}
`,
  );
  nats = await startNats({ configFile: conf });
  admin = await connectNats({ url: nats.url, name: 'registry-test', user: 'admin', pass: 'admin' });
  life = await startLifecycle(nats.url, 'life-blind', tmpStateDir(), { NATS_USER: 'blind', NATS_PASS: 'blind' });
}, 60_000);

afterAll(async () => {
  await life?.stop();
  await admin?.close();
  await nats?.stop();
});

describe('registry reads', () => {
  it('answer INTERNAL_ERROR, not an empty list, when a listed entry cannot be read', async () => {
    const task = randomUUID();
    const entry = executionEntry(task, 'life-elsewhere');
    const kv = await new Kvm(admin).open(Buckets.executions);
    await kv.put(`${task}.${entry.execution_id}`, new TextEncoder().encode(JSON.stringify(entry)));

    const err = await request(admin, Life.list, { task_id: task }, { timeoutMs: 10_000 }).then(
      (v) => ({ listed: v }),
      (e: { code?: string }) => e,
    );
    expect(err).toMatchObject({ code: 'INTERNAL_ERROR' });

    // A task with nothing listed is still an empty answer, not an error.
    expect(await request(admin, Life.list, { task_id: randomUUID() }, { timeoutMs: 10_000 })).toEqual([]);
  }, 60_000);
});
