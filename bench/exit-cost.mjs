// node bench/exit-cost.mjs [N=40]: what a node process's exit alone costs, the part of the teardown floor
// (bench/TREE-CURVE.md; its runs in docs/history/tree-curve-runs.md) no control plane or agentctl change can remove. N idle node processes, each with
// a module graph loaded (none; agentctl's for an ACP agent; a service's; the scripted agent's ACP SDK),
// are ended with SIGTERM (no handler: the kernel ends them, no JavaScript runs), and the CPU the
// exits took is this process's reaped-children time (exact, reported in 10 ms ticks for all N at
// once) less what the processes had used before, from their threads' schedstat (bench/src/cpu.ts;
// `npm run build` first). Not from their own utime + stime: each is rounded down to a 10 ms tick,
// which put about 10 ms of each process's startup into its "exit".
import { spawn } from 'node:child_process';
import { readProcStat } from '@kandev/runtime/host';
import { fileURLToPath } from 'node:url';
import { liveCpuMs } from './dist/cpu.js';
const N = Number(process.env.N ?? 40);
const root = fileURLToPath(new URL('..', import.meta.url));
/** This process's reaped children's CPU ms (stat's cutime + cstime). */
const reapedMs = () => {
  const st = readProcStat(process.pid);
  return (st.cutime + st.cstime) * 10;
};
const graphs = {
  'bare node': '',
  // What agentctl loads for an ACP agent (its main module would start one).
  'agentctl (ACP)': ['execution.js', 'http.js', 'events.js', 'adapters/acp.js']
    .map((m) => `await import(${JSON.stringify(`${root}packages/agentctl/dist/${m}`)});`)
    .join(' '),
  // What every service process loads.
  '@kandev/runtime': `await import(${JSON.stringify(`${root}packages/runtime/dist/index.js`)});`,
  'ACP SDK (scripted agent)': `await import('@agentclientprotocol/sdk');`,
};
const results = {};
for (const [name, load] of Object.entries(graphs)) {
  const procs = Array.from({ length: N }, () =>
    spawn(process.execPath, ['--input-type=module', '-e', `${load} process.stdout.write('up\\n'); setInterval(() => {}, 1000);`], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'ignore'],
    }),
  );
  await Promise.all(procs.map((p) => new Promise((res, rej) => (p.stdout.once('data', res), p.once('exit', (c) => rej(new Error(`${name}: exited ${c}`)))))));
  await new Promise((r) => setTimeout(r, 1000)); // startup's background work (GC, compilation) done
  const before = procs.reduce((s, p) => s + liveCpuMs(p.pid), 0) + reapedMs();
  const t = performance.now();
  await Promise.all(procs.map((p) => new Promise((res) => (p.once('exit', res), p.kill('SIGTERM')))));
  results[name] = { exit_cpu_ms_each: Math.round(((reapedMs() - before) / N) * 10) / 10, all_gone_ms: Math.round(performance.now() - t) };
}
console.log(JSON.stringify({ n: N, results }));
