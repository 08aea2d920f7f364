import { describe, expect, it } from 'vitest';
import { LifecycleEnv } from '../src/env.js';

describe('LifecycleEnv', () => {
  it('refuses an empty AGENTCTL_BIN at startup rather than spawning `node ""` for every launch', () => {
    // `node ""` does not fail: it waits on its stdin pipe, so each launch would hang until its deadline.
    const r = LifecycleEnv.safeParse({ AGENTCTL_BIN: '' });
    expect(r.success).toBe(false);
    expect(r.error?.issues.map((i) => i.path.join('.'))).toEqual(['AGENTCTL_BIN']);
    expect(LifecycleEnv.parse({}).AGENTCTL_BIN).toBeUndefined();
    expect(LifecycleEnv.parse({ AGENTCTL_BIN: '/opt/agentctl.js' }).AGENTCTL_BIN).toBe('/opt/agentctl.js');
  });
});

describe('MAX_EXECUTIONS default (R-11.2)', () => {
  it('is floor(0.75 × memory / 128 MiB), at least 1, memory being the cgroup limit when lower than the host', async () => {
    const { defaultMaxExecutions, usableMemory } = await import('../src/domain/capacity.js');
    const GiB = 1024 ** 3;
    expect(defaultMaxExecutions(8 * GiB)).toBe(48);
    expect(defaultMaxExecutions(24 * GiB)).toBe(144);
    expect(defaultMaxExecutions(64 * 1024 ** 2)).toBe(1);
    expect(usableMemory(24 * GiB, 8 * GiB)).toBe(8 * GiB);
    expect(usableMemory(24 * GiB, 0)).toBe(24 * GiB);
    expect(usableMemory(24 * GiB, undefined)).toBe(24 * GiB);
    expect(usableMemory(24 * GiB, 2 ** 62)).toBe(24 * GiB);
  });
  it('applies when unset; an explicit value (0 = no cap) wins', async () => {
    const { totalmem } = await import('node:os');
    const { defaultMaxExecutions, usableMemory } = await import('../src/domain/capacity.js');
    expect(LifecycleEnv.parse({}).MAX_EXECUTIONS).toBe(defaultMaxExecutions(usableMemory(totalmem(), process.constrainedMemory())));
    expect(LifecycleEnv.parse({}).MAX_EXECUTIONS).toBeGreaterThan(0);
    expect(LifecycleEnv.parse({ MAX_EXECUTIONS: '0' }).MAX_EXECUTIONS).toBe(0);
    expect(LifecycleEnv.parse({ MAX_EXECUTIONS: '7' }).MAX_EXECUTIONS).toBe(7);
  });
});
