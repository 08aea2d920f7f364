// AGENTCTL_BIN=bench/agentctl-profile.mjs AGENTCTL_REAL=<checkout>/packages/agentctl/dist/main.js AGENTCTL_PROF_DIR=<dir>:
// agentctl under a V8 CPU profile, written to <dir>/agentctl.<pid>.cpuprofile when it exits (node refuses
// --cpu-prof in NODE_OPTIONS, and the lifecycle spawns agentctl as `node <AGENTCTL_BIN> ...`).
import { Session } from 'node:inspector';
import { writeFileSync, mkdirSync } from 'node:fs';
const dir = process.env.AGENTCTL_PROF_DIR ?? 'agentctl-profiles';
mkdirSync(dir, { recursive: true });
const s = new Session();
s.connect();
s.post('Profiler.enable');
s.post('Profiler.setSamplingInterval', { interval: Number(process.env.AGENTCTL_PROF_US ?? 500) });
s.post('Profiler.start');
process.on('exit', () => {
  s.post('Profiler.stop', (err, r) => {
    if (!err) writeFileSync(`${dir}/agentctl.${process.pid}.cpuprofile`, JSON.stringify(r.profile));
  });
});
await import(process.env.AGENTCTL_REAL);
