import { execFile } from 'node:child_process';
import { chmodSync, existsSync, lstatSync, mkdtempSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DrainReport } from '@kandev/contracts';
import { cmdline, eventually, procAlive, procStat, repoRoot } from '@kandev/testkit';
import { makeTask, startWorld, type World } from './support.js';

/**
 * What the image runs, run (ADR 0053): scripts/image-layout.mjs lays out /app as the Dockerfile's build
 * stage does, into a directory of this test's own, and a whole stack runs its five services from
 * there, with none of the repository's node_modules. An agent is launched through the API (lifecycle
 * finds agentctl's bundle through the layout's one workspace link), answers, and the drain command a
 * lifecycle pod's preStop runs, started from the layout too, stops it. No Docker engine here: this is
 * the image's /app without the image.
 */
const execFileP = promisify(execFile);
let layout: string;
let w: World;

beforeAll(async () => {
  layout = mkdtempSync(join(tmpdir(), 'kandev-image-'));
  // /app in the image is world-readable: agentctl and the agent run under uids of their own (ADR 0019).
  chmodSync(layout, 0o755);
  await execFileP(process.execPath, [join(repoRoot, 'scripts/image-layout.mjs'), layout], { timeout: 60_000 });
  // The scripted agents are test doubles and not in the image: the catalogue names the repository's.
  const catalogue = join(layout, 'agents.json');
  writeFileSync(
    catalogue,
    JSON.stringify({
      'scripted-acp': { protocol: 'acp', command: process.execPath, args: [join(repoRoot, 'packages/testkit/dist/agents/scripted-acp.bundle.js')] },
    }),
    { mode: 0o644 },
  );
  w = await startWorld({ KANDEV_AGENT_CATALOGUE: catalogue }, { serviceRoot: layout });
}, 120_000);
afterAll(async () => {
  await w?.stop();
  if (layout) rmSync(layout, { recursive: true, force: true });
});

describe("the image's layout", () => {
  it('holds no third-party node_modules: only the link to agentctl', () => {
    expect(readdirSync(join(layout, 'node_modules'))).toEqual(['@kandev']);
    expect(readdirSync(join(layout, 'node_modules/@kandev'))).toEqual(['agentctl']);
    const link = join(layout, 'node_modules/@kandev/agentctl');
    expect(lstatSync(link).isSymbolicLink()).toBe(true);
    expect(readlinkSync(link)).toBe('../../packages/agentctl');
    expect(existsSync(join(layout, 'packages/testkit')), 'the test kit is not in the image').toBe(false);
    expect(existsSync(join(layout, 'services/lifecycle/dist/drain.bundle.js'))).toBe(true);
    expect(existsSync(join(layout, 'services/orchestrator/migrations'))).toBe(true);
    expect(existsSync(join(layout, 'services/gateway/dist/console/index.html')), 'the console is built into the gateway').toBe(true);
  });

  it('runs the stack: an agent launched from it answers, and the drain command from it stops the agent', async () => {
    for (const [name, svc] of w.stack.services) expect(cmdline(svc.pid), name).toContain(join(layout, `services/${name}/dist/${name}.bundle.js`));
    const ui = await fetch(`${w.stack.gatewayUrl}/ui/`);
    expect(ui.status).toBe(200);

    const { task } = await makeTask(w.api, { title: 'from the image layout', agent: 'scripted-acp' });
    const session = await w.api.ok('POST', `/tasks/${task.id}/sessions`, { prompt: JSON.stringify({ script: [{ say: 'laid out' }, { sleep_ms: 120_000 }] }) });
    await eventually(async () => {
      const { items } = (await w.api.get(`/sessions/${session.id}/messages`)).body as { items: Array<{ role: string; text: string }> };
      return items.some((m) => m.role === 'agent' && m.text.includes('laid out')) || null;
    }, 30_000);
    const view = (await w.api.get(`/sessions/${session.id}`)).body as { execution: { pid: number } | null };
    const agentPid = view.execution!.pid;
    const agent = procStat(agentPid)!;
    expect(cmdline(agent.ppid)).toContain(join(layout, 'packages/agentctl/dist/agentctl.bundle.js'));

    const { stdout } = await execFileP(process.execPath, [join(layout, 'services/lifecycle/dist/drain.bundle.js'), '--wait-ms', '0', '--grace-ms', '500'], {
      env: { ...process.env, ...w.stack.busEnv('lifecycle'), NATS_URL: w.stack.nats.url, INSTANCE_ID: 'lifecycle-1' },
      timeout: 45_000,
    });
    const report = DrainReport.parse(JSON.parse(stdout.trim()));
    expect(report.stopped).toHaveLength(1);
    await eventually(async () => !procAlive({ pid: agentPid, start: agent.start }) || null, 20_000);
  }, 90_000);
});
