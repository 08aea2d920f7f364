import { describe, expect, it } from 'vitest';
import { claimedActorLabel, taskIdOf } from '../src/flows/bus-refusals.js';

// What the audit row of a request refused for its caller says (ADR 0055): the actor it claimed,
// marked unverified, on the task it named.
describe('the audit of a request refused for its caller', () => {
  it('names the claimed actor as unverified, whatever it was', () => {
    expect(claimedActorLabel({ type: 'operator', id: 'agent-forged', workspaces: ['*'] })).toBe('operator:agent-forged (unverified)');
    expect(claimedActorLabel({ type: 'system', id: 'x' })).toBe('system:x (unverified)');
    expect(claimedActorLabel(undefined)).toBe('unknown (unverified)');
    expect(claimedActorLabel({ type: 'operator', id: 42 })).toBe('unknown (unverified)');
  });
  it('is kept on the task the request named, if it named one', () => {
    expect(taskIdOf({ task_id: '00000000-0000-4000-8000-000000000001' })).toBe('00000000-0000-4000-8000-000000000001');
    expect(taskIdOf({ name: 'workspace' })).toBeUndefined();
    expect(taskIdOf(null)).toBeUndefined();
  });
});
