import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, readCmdline, stubPrompt } from '@kandev/testkit';
import {
  descendsFrom,
  parentOf,
  running,
  treeOf,
  makeTask,
  processesMatching,
  REAL_AGENTS,
  runningSession,
  shellTool,
  reportOnFailure,
  startRealWorld,
  type RealWorld,
} from './support.js';

/**
 * R-6 against the published agents: a task stop leaves nothing of the agent's process tree behind,
 * including a long-running shell command the agent started through its own tool. The command
 * ignores SIGTERM and SIGHUP, so only a stop that reaches it with SIGKILL after the grace ends it.
 */
const cmdline = (pid: number) => readCmdline(pid).slice(0, 120) || '?';

let w: RealWorld;
reportOnFailure(() => w);
beforeAll(async () => {
  w = await startRealWorld({ TEARDOWN_GRACE_MS: '1000' });
});
afterAll(async () => w?.stop());

describe.each(REAL_AGENTS)('task stop with the published %s agent', (agent) => {
  /** Starts a session whose agent runs a SIGTERM-proof sleep through its own shell tool. */
  async function agentWithCommand() {
    // A duration no other process uses: how the test finds the command in /proc.
    const seconds = `${4000 + Math.floor(Math.random() * 999)}.${process.pid % 1000}`;
    const command = `trap '' TERM HUP INT; sleep ${seconds}; echo finished`;
    const { task } = await makeTask(w.api, { agent });
    const { tool, args } = shellTool(agent, command);
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: stubPrompt({ tool, args, then: 'command started' }, `tree-${agent}`) });
    const pid = (await runningSession(w.api, session.id)).execution.pid as number;
    // The agent ran the command through its own tool: a sleep under the agent's process tree.
    const sleeper = await eventually(async () => processesMatching(`sleep ${seconds}`).find((p) => descendsFrom(p, pid)), 60_000, 100);
    return { task, session, pid, sleeper, needle: `sleep ${seconds}` };
  }

  async function stopAndExpectNothingLeft(r: Awaited<ReturnType<typeof agentWithCommand>>, tree: number[]) {
    try {
      expect((await w.api.post(`/tasks/${r.task.id}/stop`)).status).toBe(200);
      await eventually(async () => ((await w.api.get(`/sessions/${r.session.id}`)).body.execution === null ? true : null), 30_000, 100);
      expect(running(r.pid)).toBe(false);
      // Once the execution is reported gone, nothing of its tree may be left.
      expect(processesMatching(r.needle)).toEqual([]);
      expect(tree.filter(running).map((p) => `${p}: ${cmdline(p)}`)).toEqual([]);
    } finally {
      // A failed run must not leave this test's processes behind.
      for (const p of tree) {
        try {
          process.kill(p, 'SIGKILL');
        } catch {
          // gone
        }
      }
    }
  }

  it('leaves no process of the agent tree behind, the shell command it started included', async () => {
    const r = await agentWithCommand();
    await stopAndExpectNothingLeft(r, treeOf(r.pid));
  });

  it('leaves nothing behind when the agent is wedged and only SIGKILL ends it', async () => {
    const r = await agentWithCommand();
    // Freeze the agent's own processes (not the command): SIGTERM goes unanswered, so the grace runs
    // out and the agent cannot clean up after itself. Only agentctl's stop of the whole tree helps.
    const tree = treeOf(r.pid);
    for (const p of tree) {
      if (p === r.sleeper) continue;
      try {
        process.kill(p, 'SIGSTOP');
      } catch {
        // a short-lived helper of the agent ended meanwhile
      }
    }
    await stopAndExpectNothingLeft(r, tree);
  });
});

describe('lifecycle dies with the published agents running', () => {
  it('agentctl (exit with parent) stops each agent tree, the shell commands included', async () => {
    const sessions = [];
    for (const agent of REAL_AGENTS) {
      const seconds = `${6000 + Math.floor(Math.random() * 999)}.${process.pid % 1000}`;
      const { task } = await makeTask(w.api, { agent });
      const { tool, args } = shellTool(agent, `trap '' TERM HUP INT; sleep ${seconds}; echo finished`);
      const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: stubPrompt({ tool, args }, `orphan-${agent}`) });
      const pid = (await runningSession(w.api, session.id)).execution.pid as number;
      await eventually(async () => processesMatching(`sleep ${seconds}`).find((p) => descendsFrom(p, pid)), 60_000, 100);
      // agentctl is the agent's parent: it exits once its stop has found nothing of the tree left.
      const agentctl = parentOf(pid)!;
      expect(cmdline(agentctl)).toContain('agentctl');
      sessions.push({ pid, agentctl, needle: `sleep ${seconds}`, tree: treeOf(pid) });
    }
    const lifecycle = w.stack.services.get('lifecycle')!;
    try {
      // No teardown runs: only agentctl, seeing its stdin pipe close, can stop the agents now.
      lifecycle.process.kill('SIGKILL');
      for (const s of sessions) {
        // Done when agentctl says so by exiting, not when the tree seen at the start is gone: that
        // snapshot may predate the command's own `sleep` (the shell whose command line names it is
        // found first), and a process SIGKILLed with its group shows as running until it is scheduled.
        await eventually(async () => !running(s.agentctl) && s.tree.every((p) => !running(p)), 20_000, 50).catch((e: unknown) => {
          throw new Error(
            `${String(e)}; still running: ${[s.agentctl, ...s.tree]
              .filter(running)
              .map((p) => `${p} ${cmdline(p)}`)
              .join(' | ')}`,
          );
        });
        const left = processesMatching(s.needle);
        expect(left.map((p) => `${p} (parent ${parentOf(p)}): ${cmdline(p)}`)).toEqual([]);
      }
    } finally {
      for (const s of sessions) for (const p of [...s.tree, ...processesMatching(s.needle)]) if (running(p)) process.kill(p, 'SIGKILL');
      await w.stack.restart('lifecycle');
    }
  });
});
