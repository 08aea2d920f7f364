import { afterEach, expect, it } from 'vitest';
import { isAlive, killAll, startAgentctl } from './harness.js';

afterEach(killAll);

/**
 * Issue 11: an owner (the lifecycle instance) that is frozen or hung keeps agentctl's stdin open, so
 * only its heartbeats tell agentctl it is alive. While they come, the agent runs on well past the
 * bound; once they stop, agentctl stops the agent within the bound (plus its stop) and exits.
 */
it('keeps the agent while heartbeats come, and stops it once the owner has been silent past --owner-silence-ms', async () => {
  const boundMs = 800;
  const a = await startAgentctl('scripted-acp', ['--exit-with-parent', '1', '--owner-silence-ms', String(boundMs)]);
  let gone = false;
  void a.exited.then(() => (gone = true));

  // Heartbeats every 100 ms for three bounds: agentctl must not take the owner for dead.
  const heartbeatsUntil = performance.now() + 3 * boundMs;
  let lastBeat = performance.now();
  while (performance.now() < heartbeatsUntil) {
    a.child.stdin.write('\n');
    lastBeat = performance.now();
    await new Promise((r) => setTimeout(r, 100));
    expect(gone).toBe(false);
  }
  expect(isAlive(a.agentPid)).toBe(true);

  // Silence (stdin still open): stopped within the bound plus agentctl's stop, with headroom for a busy
  // machine. agentctl counts the silence from the last heartbeat it read, which was written up to one
  // heartbeat period before the loop ended: measure from that write, not from the loop's end.
  const exit = await Promise.race([a.exited, new Promise<null>((r) => setTimeout(() => r(null), boundMs + 15_000))]);
  expect(exit).not.toBeNull();
  expect(performance.now() - lastBeat).toBeGreaterThanOrEqual(boundMs - 50);
  expect(isAlive(a.agentPid)).toBe(false);
  expect(a.stderr()).toContain('parent is silent');
  expect(a.events.at(-1)).toMatchObject({ type: 'agent_exited', stopped_by: 'owner_silent' });
});
