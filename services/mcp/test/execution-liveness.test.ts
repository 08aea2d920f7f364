import type { Execution } from '@kandev/contracts';
import type { RegistryReader } from '@kandev/runtime';
import { describe, expect, it } from 'vitest';
import { ExecutionLiveness } from '../src/execution-liveness.js';

const TASK = '00000000-0000-4000-8000-000000000001';
const EXEC = '00000000-0000-4000-8000-000000000002';

/** A registry whose answers the test sets, counting reads. */
function fakeRegistry(entry: () => Partial<Execution> | null | Error) {
  const reads: Array<[string, string | undefined]> = [];
  const reader = {
    async get(executionId: string, taskId?: string) {
      reads.push([executionId, taskId]);
      await new Promise((r) => setImmediate(r));
      const e = entry();
      if (e instanceof Error) throw e;
      return e as Execution | null;
    },
  } as unknown as RegistryReader;
  return { reads, registry: async () => reader };
}

describe('ExecutionLiveness (ADR 0021)', () => {
  it("reads the entry under the token's task, remembers a live answer, and shares one read among concurrent checks", async () => {
    const f = fakeRegistry(() => ({ task_id: TASK, execution_id: EXEC, status: 'RUNNING' }));
    const live = new ExecutionLiveness(f.registry, 60_000);
    await Promise.all([1, 2, 3].map(() => live.check({ task_id: TASK, execution_id: EXEC, mode: 'task' })));
    await live.check({ task_id: TASK, execution_id: EXEC, mode: 'task' });
    expect(f.reads).toEqual([[EXEC, TASK]]);
  });

  it('reads again once the cache lapses, and refuses when the entry is gone or ending', async () => {
    let entry: Partial<Execution> | null = { task_id: TASK, execution_id: EXEC, status: 'READY' };
    const f = fakeRegistry(() => entry);
    const live = new ExecutionLiveness(f.registry, 0);
    await live.check({ task_id: TASK, execution_id: EXEC, mode: 'task' });
    entry = { task_id: TASK, execution_id: EXEC, status: 'COMPLETED' };
    await expect(live.check({ task_id: TASK, execution_id: EXEC, mode: 'task' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    entry = null;
    await expect(live.check({ task_id: TASK, execution_id: EXEC, mode: 'task' })).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
    expect(f.reads).toHaveLength(3);
  });

  it('a token without execution_id is not looked up; a registry failure is UNAVAILABLE, not UNAUTHORIZED', async () => {
    const f = fakeRegistry(() => new Error('no responders'));
    const live = new ExecutionLiveness(f.registry, 1_000);
    await live.check({ task_id: TASK, mode: 'task' });
    expect(f.reads).toHaveLength(0);
    await expect(live.check({ task_id: TASK, execution_id: EXEC, mode: 'task' })).rejects.toMatchObject({ code: 'UNAVAILABLE' });
  });
});
