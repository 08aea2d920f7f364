// node bench/teardown-cpu.mjs [ROOT=<checkout>] [N=50]: N agentctl + scripted agent pairs spawned directly (no
// control plane), each with a turn in flight, all stopped at once through agentctl's HTTP stop as the lifecycle
// stops them. Prints when the last agent was gone, the wall time until every agentctl exited and the CPU the pairs spent from the stop on
// (this process's reaped-children time, less what the pairs had used before). Run it against two checkouts
// (ROOT) to compare a change to agentctl's stop. BIN=<wrapper> runs agentctl through a profiling wrapper.
import { spawn } from 'node:child_process';
import { childProcesses, hasEnded, readProcStat } from '@kandev/runtime/host';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
// schedstat, not 10 ms ticks: what the pairs had used before the stop, exact (bench/src/cpu.ts; `npm run build` first).
import { liveCpuMs } from './dist/cpu.js';
const ROOT = process.env.ROOT ?? new URL('..', import.meta.url).pathname.replace(/\/$/, '');
const N = Number(process.env.N ?? 50);
// agentctl as the lifecycle spawns it (ADR 0051).
const bin = process.env.BIN ?? `${ROOT}/packages/agentctl/dist/agentctl.bundle.js`;
// agentctl takes only callers that hold its execution secret (docs/security.md); a hand-run one reads it here.
const SECRET = randomUUID();
const auth = { authorization: `Bearer ${SECRET}` };
/** This process's reaped children's CPU ms (stat's cutime + cstime). */
const reaped = () => {
  const st = readProcStat(process.pid);
  return (st.cutime + st.cstime) * 10;
};
const kids = (pid) => childProcesses(pid).map((p) => p.pid);
const pairs = [];
// A failure part-way (a request refused on a loaded machine) must not leave the pairs running: they
// are detached, each in a process group of its own.
process.on('uncaughtException', (e) => {
  console.error(e);
  for (const p of pairs)
    if (p?.c.pid)
      try {
        process.kill(-p.c.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
  process.exit(1);
});
await Promise.all(
  Array.from({ length: 8 }, async () => {
    while (pairs.length < N) {
      const slot = pairs.length;
      pairs.push(null);
      const c = spawn(
        process.execPath,
        [
          bin,
          '--agent',
          'scripted-acp',
          '--port',
          '0',
          '--execution-id',
          randomUUID(),
          '--session-id',
          randomUUID(),
          '--task-id',
          randomUUID(),
          '--mcp-url',
          'http://127.0.0.1:9/mcp',
          '--agent-nice',
          '10',
        ],
        { stdio: ['pipe', 'pipe', 'pipe'], detached: true, env: { ...process.env, AGENTCTL_MCP_TOKEN: 'x', AGENTCTL_SECRET: SECRET } },
      );
      c.stderr.resume();
      const ready = await new Promise((res) =>
        createInterface({ input: c.stdout }).on('line', (l) => {
          if (l.includes('"ready"')) res(JSON.parse(l));
        }),
      );
      pairs[slot] = { c, url: ready.url ?? `http://127.0.0.1:${ready.port}` };
    }
  }),
);
// a turn in flight in each (as the bench's live sessions)
await Promise.all(
  pairs.map((p) =>
    fetch(`${p.url}/api/v1/acp/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ prompt: JSON.stringify({ script: [{ sleep_ms: 600000 }] }) }),
    }).then((r) => r.text()),
  ),
);
await new Promise((r) => setTimeout(r, 8000)); // settle
const before = pairs.reduce((s, p) => s + liveCpuMs(p.c.pid) + kids(p.c.pid).reduce((t, k) => t + liveCpuMs(k), 0), 0) + reaped();
const agents = pairs.flatMap((p) => kids(p.c.pid));
const t = performance.now();
// When the last agent process is gone: what "every agent process gone" in the tree-hold goal measures.
const agentsGone = (async () => {
  while (
    agents.some((pid) => {
      const st = readProcStat(pid);
      return st !== undefined && !hasEnded(st.state);
    })
  )
    await new Promise((r) => setTimeout(r, 10));
  return performance.now() - t;
})();
console.error('stop at mono ms', Number(process.hrtime.bigint() / 1000000n));
await Promise.all(
  pairs.map(
    (p) =>
      new Promise((res) => {
        p.c.once('exit', res);
        fetch(`${p.url}/api/v1/stop`, { method: 'POST', headers: { 'content-type': 'application/json', ...auth }, body: JSON.stringify({ grace_ms: 2000 }) })
          .then((r) => r.text())
          .catch(() => undefined);
      }),
  ),
);
const wall = performance.now() - t;
console.log(
  JSON.stringify({
    root: ROOT,
    n: N,
    agents_gone_ms: Math.round(await agentsGone),
    wall_ms: Math.round(wall),
    teardown_cpu_ms: Math.round(reaped() - before),
    load: (await import('node:os')).loadavg()[0],
  }),
);
