// `npm run bench:wire`: the 1-caller stop and the design floor of `12-stop`, timed off the wire.
// It captures loopback TCP with tcpdump while the scenario runs (as root, or with CAP_NET_RAW),
// maps each port to its process through `ss -tnp` and /proc/<pid>/cmdline, and writes
// bench/results/wire.json (the table in WIRE.md).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { readCmdline } from '@kandev/runtime/host';
import { beginResult, renderTables, type Figure } from '../results.js';
import { readPcap, wireBreakdown, type ClientCall, type Owner, type WireRow } from './analysis.js';

const benchDir = fileURLToPath(new URL('../..', import.meta.url));
const write = process.env.BENCH_WRITE !== '0';
/** The 1-caller stops and the paced design floor come after 250 ms of quiet; back-to-back calls do not. */
const QUIET_MS = 150;

function roleOf(cmdline: string, comm: string): string {
  const service = /services\/(\w+)\//.exec(cmdline)?.[1];
  if (service) return service;
  if (cmdline.includes('sdk-noop-server')) return 'sdk-edge';
  if (cmdline.includes('design-floor-decider')) return 'decider';
  if (cmdline.includes('agentctl')) return 'agentctl';
  if (comm === 'nats-server') return 'nats-server';
  if (comm === 'postgres' || cmdline.startsWith('postgres')) return 'postgres';
  return comm;
}

/** Every second: which process owns each local port (connections of the run come and go with its stacks). */
function sampleOwners(into: Map<number, Owner>): () => void {
  const roles = new Map<number, string>();
  const once = () => {
    const out = spawnSync('ss', ['-tnpH', 'state', 'established'], { encoding: 'utf8' }).stdout ?? '';
    for (const line of out.split('\n')) {
      const m = /127\.0\.0\.1:(\d+)\s+127\.0\.0\.1:\d+\s+users:\(\("([^"]+)",pid=(\d+)/.exec(line);
      if (!m) continue;
      const pid = Number(m[3]);
      if (!roles.has(pid)) {
        roles.set(pid, roleOf(readCmdline(pid), m[2]!));
      }
      into.set(Number(m[1]), { pid, role: roles.get(pid)! });
    }
  };
  once();
  const timer = setInterval(once, 1_000);
  return () => {
    clearInterval(timer);
    once();
  };
}

async function capture(pcap: string): Promise<() => Promise<void>> {
  const dump = spawn('tcpdump', ['-i', 'lo', '-s', '700', '-B', '65536', '-U', '-w', pcap, 'tcp'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let said = '';
  await new Promise<void>((resolve, reject) => {
    dump.stderr!.on('data', (d: Buffer) => {
      said += d.toString();
      if (said.includes('listening on')) resolve();
    });
    dump.once('exit', (code) => reject(new Error(`tcpdump exited with ${code}: ${said.trim()} (it needs root or CAP_NET_RAW)`)));
  });
  return async () => {
    const exited = new Promise((r) => dump.once('exit', r));
    dump.kill('SIGINT');
    await exited;
    const dropped = /(\d+) packets dropped by kernel/.exec(said)?.[1];
    if (dropped && dropped !== '0') console.warn(`[wire] tcpdump dropped ${dropped} packets: segments may be missing`);
  };
}

function runScenario(wallLog: string): Promise<string[]> {
  const env = { ...process.env, BENCH_SCENARIOS: '12-stop', BENCH_WRITE: '0', BENCH_STOP_CONCURRENCY: '1', BENCH_WALL_LOG: wallLog };
  const child = spawn(process.execPath, [join(benchDir, 'dist/run.js')], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines: string[] = [];
  child.stdout!.on('data', (d: Buffer) => {
    process.stdout.write(d);
    lines.push(...d.toString().split('\n'));
  });
  return new Promise((resolve, reject) =>
    child.once('exit', (code) => (code === 0 ? resolve(lines) : reject(new Error(`the 12-stop scenario exited with ${code}`)))),
  );
}

const f = (x: number | undefined) => (x === undefined || !Number.isFinite(x) ? '' : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));

function table(rows: WireRow[]): string {
  const head = '| segment | design floor p50 / p90 | stop p50 / p90 | stop − design, p50 |\n|---|--:|--:|--:|\n';
  return (
    head +
    rows
      .map(
        (r) =>
          `| ${r.segment} | ${r.design ? `${f(r.design.p50)} / ${f(r.design.p90)}` : '—'} | ${r.stop ? `${f(r.stop.p50)} / ${f(r.stop.p90)}` : '—'} | ${r.design && r.stop ? f(r.stop.p50 - r.design.p50) : ''} |`,
      )
      .join('\n')
  );
}

async function main() {
  if (spawnSync('tcpdump', ['--version']).error) throw new Error('tcpdump is not on PATH (Debian: apt-get install tcpdump)');
  if (!existsSync(join(benchDir, 'dist/run.js'))) throw new Error('build first: npm run build');
  const dir = mkdtempSync(join(tmpdir(), 'kandev-wire-'));
  const pcap = join(dir, 'loopback.pcap');
  const wallLog = join(dir, 'wall.log');
  writeFileSync(wallLog, '');
  const record = beginResult({ name: 'wire', title: 'The 1-caller stop, off the wire', command: 'npm run bench:wire' });
  const owners = new Map<number, Owner>();
  const stopSampling = sampleOwners(owners);
  const stopCapture = await capture(pcap);
  let printed: string[];
  try {
    printed = await runScenario(wallLog);
  } finally {
    stopSampling();
    await stopCapture();
  }
  const client: ClientCall[] = readFileSync(wallLog, 'utf8')
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((l) => {
      const [kind, start, end] = l.split(' ');
      return { kind: kind as ClientCall['kind'], start: Number(start), end: Number(end) };
    });
  const { rows, stops, designs } = wireBreakdown(readPcap(readFileSync(pcap)), owners, client, QUIET_MS);
  rmSync(dir, { recursive: true, force: true });
  const figures = printed
    .filter((l) => /^\s+(stop_task\.stopped\.1(\.paced|\.vs_design)?|floor\.(design|mcp\+nats\+pg)\.paced)\s/.test(l))
    .map((l) => l.trim());
  const wireFigures: Figure[] = rows.map((r, i) => ({
    id: `wire.${String(i + 1).padStart(2, '0')}`,
    label: r.segment,
    ...(r.design ? { design_p50: r.design.p50, design_p90: r.design.p90 } : {}),
    ...(r.stop ? { stop_p50: r.stop.p50, stop_p90: r.stop.p90 } : {}),
    ...(r.design && r.stop ? { stop_minus_design_p50: r.stop.p50 - r.design.p50 } : {}),
  }));
  if (write) {
    const path = record.write(wireFigures, { notes: [`${stops} stops, ${designs} design-floor calls`, ...figures] });
    renderTables();
    console.log(`wrote ${path}`);
  }
  console.log(`\n${table(rows)}\n`);
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
