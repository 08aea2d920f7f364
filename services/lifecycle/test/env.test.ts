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
