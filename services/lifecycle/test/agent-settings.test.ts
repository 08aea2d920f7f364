import { scriptedAgentPath } from '@kandev/agentctl';
import type { NatsConnection, RunningService } from '@kandev/runtime';
import { taskHomeDir } from '@kandev/runtime';
import { startNats, type TestNats } from '@kandev/testkit';
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, lstatSync, mkdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentIsolation } from '../src/isolation/agent-isolation.js';
import { readSettings, SETTINGS_LIMITS } from '../src/isolation/agent-settings.js';
import {
  EventLog,
  FakeOrchestrator,
  killHard,
  launch,
  log,
  launchRequest,
  natsClient,
  promptAt,
  script,
  spawnLifecycle,
  startLifecycle,
  stopAt,
  tmpStateDir,
} from './helpers.js';

/*
 * A catalogue entry's `settings_from` (docs/agents.md, "Settings"), against real processes: this
 * machine's tests run as root, so every execution has a uid and a home of its own, and a settings
 * directory shared by two of them is what failed (`Permission denied`) before this existed.
 */

const uidOf = (pid: number): number => Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

const CONFIG = 'model = "gpt-test"\napproval_policy = "never"\n';
const PROMPT = 'be brief\n';

/** A settings directory like an operator's: root-only (0700/0600), so agents could not read it themselves. */
function settingsDir(dir: string): string {
  mkdirSync(join(dir, 'prompts'), { recursive: true, mode: 0o700 });
  writeFileSync(join(dir, 'config.toml'), CONFIG, { mode: 0o600 });
  writeFileSync(join(dir, 'prompts', 'review.md'), PROMPT, { mode: 0o600 });
  chmodSync(dir, 0o700);
  return dir;
}

/** A catalogue file agents can read (agentctl reads it under the agent's uid) with one scripted agent that has settings. */
function catalogue(stateDir: string, name: string, settingsFrom: unknown): string {
  const file = join(stateDir, `${name}.json`);
  const entry = { protocol: 'acp', command: process.execPath, args: [scriptedAgentPath('scripted-acp')], settings_from: settingsFrom };
  writeFileSync(file, JSON.stringify({ [name]: entry }), { mode: 0o644 });
  return file;
}

describe('settings_from: read-only settings copied into each execution’s own home', { timeout: 120_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let life: RunningService;
  let events: EventLog;
  const stateDir = tmpStateDir();
  const workRoot = join(stateDir, 'work');
  const source = settingsDir(join(stateDir, 'codex-settings'));

  beforeAll(async () => {
    nats = await startNats();
    nc = await natsClient(nats.url, 'settings-test');
    await FakeOrchestrator.start(nc);
    events = new EventLog(nc);
    const file = catalogue(stateDir, 'codex-like', { source, home_path: '.codex' });
    // lifecycle and the agentctl it spawns read the catalogue from the process environment (this worker's).
    process.env.KANDEV_AGENT_CATALOGUE = file;
    life = await startLifecycle(nats.url, 'life-settings', stateDir);
  });
  afterAll(async () => {
    delete process.env.KANDEV_AGENT_CATALOGUE;
    await life?.stop();
    await nc?.close();
    await nats?.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  /** Runs one script turn and returns what the agent said in it. */
  async function turn(executionId: string, steps: unknown[]): Promise<string> {
    const turnId = randomUUID();
    await promptAt(nc, 'life-settings', { execution_id: executionId, turn_id: turnId, prompt: script(steps) });
    await events.waitFor('turn.completed', (e) => e.data.turn_id === turnId);
    return events
      .of('agent.message', executionId)
      .filter((e) => e.data.turn_id === turnId)
      .map((e) => e.data.text)
      .join('');
  }

  async function stop(executionId: string): Promise<void> {
    await stopAt(nc, 'life-settings', { execution_id: executionId, reason: 'test' });
    await events.waitFor('execution.stopped', (e) => e.data.execution_id === executionId);
  }

  it('two executions of the same agent under different uids both read the settings; neither reads the other’s home', async () => {
    const [a, b] = await Promise.all([launch(nc, launchRequest({ agent: 'codex-like' })), launch(nc, launchRequest({ agent: 'codex-like' }))]);
    const [uidA, uidB] = [uidOf(a.pid!), uidOf(b.pid!)];
    expect(uidA).not.toBe(uidB);
    expect(uidA).not.toBe(0);
    const homeA = taskHomeDir(workRoot, a.workspace_id, a.task_id);
    const homeB = taskHomeDir(workRoot, b.workspace_id, b.task_id);

    const saidA = await turn(a.execution_id, [
      { read_file: '~/.codex/config.toml' },
      { read_file: '~/.codex/prompts/review.md' },
      { read_file: join(homeB, '.codex/config.toml') },
    ]);
    const saidB = await turn(b.execution_id, [
      { read_file: '~/.codex/config.toml' },
      { read_file: '~/.codex/prompts/review.md' },
      { read_file: join(homeA, '.codex/config.toml') },
    ]);
    for (const [said, other] of [
      [saidA, homeB],
      [saidB, homeA],
    ] as const) {
      expect(said).toContain(`read_file ~/.codex/config.toml: ${CONFIG}`);
      expect(said).toContain(`read_file ~/.codex/prompts/review.md: ${PROMPT}`);
      expect(said).toContain(`read_file ${join(other, '.codex/config.toml')}: error EACCES`);
    }
    // Each copy is its execution's own, private: 0700 directories, 0600 files.
    for (const [home, uid] of [
      [homeA, uidA],
      [homeB, uidB],
    ] as const) {
      for (const [path, mode] of [
        ['.codex', 0o700],
        ['.codex/prompts', 0o700],
        ['.codex/config.toml', 0o600],
        ['.codex/prompts/review.md', 0o600],
      ] as const) {
        const st = statSync(join(home, path));
        expect({ path, uid: st.uid, gid: st.gid, mode: st.mode & 0o777 }).toEqual({ path, uid, gid: uid, mode });
      }
    }
    // The source is untouched and still root's.
    expect(statSync(join(source, 'config.toml')).uid).toBe(0);
    expect(readFileSync(join(source, 'config.toml'), 'utf8')).toBe(CONFIG);
    await Promise.all([stop(a.execution_id), stop(b.execution_id)]);
  });

  it('a later execution of the task gets the settings anew: a link left in their place is replaced, not followed', async () => {
    const first = await launch(nc, launchRequest({ agent: 'codex-like' }));
    const home = taskHomeDir(workRoot, first.workspace_id, first.task_id);
    await stop(first.execution_id);
    // What an agent could leave behind: its config swapped for a link to a root-only file, and its
    // own state beside the settings.
    const secret = join(stateDir, 'root-only');
    writeFileSync(secret, 'not for agents\n', { mode: 0o600 });
    rmSync(join(home, '.codex/config.toml'));
    symlinkSync(secret, join(home, '.codex/config.toml'));
    writeFileSync(join(home, '.codex/history.jsonl'), 'kept\n');

    const again = await launch(nc, launchRequest({ agent: 'codex-like', task_id: first.task_id, workspace_id: first.workspace_id }));
    const said = await turn(again.execution_id, [{ read_file: '~/.codex/config.toml' }, { read_file: '~/.codex/history.jsonl' }]);
    expect(said).toContain(`read_file ~/.codex/config.toml: ${CONFIG}`);
    expect(said).toContain('read_file ~/.codex/history.jsonl: kept\n');
    expect(lstatSync(join(home, '.codex/config.toml')).isFile()).toBe(true);
    expect(statSync(secret)).toMatchObject({ uid: 0, gid: 0 });
    expect(statSync(secret).mode & 0o777).toBe(0o600);
    expect(readFileSync(secret, 'utf8')).toBe('not for agents\n');
    await stop(again.execution_id);
  });

  it('refuses to start, in words, with a settings source that is missing, unreadable or holds a symbolic link', async () => {
    // The service as its own process, as an operator starts it: it exits, saying why.
    const refusal = (name: string, settingsFrom: unknown) =>
      spawnLifecycle({
        NATS_URL: nats.url,
        INSTANCE_ID: `life-${name}`,
        KANDEV_STATE_DIR: stateDir,
        KANDEV_AGENT_CATALOGUE: catalogue(stateDir, name, settingsFrom),
      }).then(
        async (child) => {
          await killHard(child);
          throw new Error('lifecycle started');
        },
        (e: Error) => e.message,
      );
    expect(await refusal('missing', { source: join(stateDir, 'nowhere'), home_path: '.codex' })).toContain(
      `agent \\"missing\\": settings_from source ${join(stateDir, 'nowhere')} does not exist`,
    );
    expect(await refusal('unreadable', { source: '/etc/passwd/settings', home_path: '.codex' })).toContain(
      `agent \\"unreadable\\": settings_from source /etc/passwd/settings cannot be read (ENOTDIR)`,
    );
    const linked = settingsDir(join(stateDir, 'linked-settings'));
    symlinkSync('/etc/shadow', join(linked, 'prompts', 'shadow'));
    expect(await refusal('linked', { source: linked, home_path: '.codex' })).toContain(`source ${linked}/prompts/shadow is a symbolic link`);
  });
});

describe('readSettings', () => {
  const dir = tmpStateDir();
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads a directory whole, or named files by their names; a named path is followed (a ConfigMap volume’s files are links)', async () => {
    const src = settingsDir(join(dir, 'src'));
    expect(await readSettings('x', { source: src, home_path: './.codex/' })).toEqual({
      homeParts: ['.codex'],
      entries: [
        { kind: 'file', name: 'config.toml', data: Buffer.from(CONFIG) },
        { kind: 'dir', name: 'prompts', entries: [{ kind: 'file', name: 'review.md', data: Buffer.from(PROMPT) }] },
      ],
    });
    // A ConfigMap volume: <mount>/config.toml -> ..data/config.toml.
    mkdirSync(join(dir, 'cm', '..data'), { recursive: true });
    writeFileSync(join(dir, 'cm', '..data', 'settings.json'), '{}');
    symlinkSync('..data/settings.json', join(dir, 'cm', 'settings.json'));
    expect(await readSettings('x', { source: [join(dir, 'cm', 'settings.json')], home_path: '.' })).toEqual({
      homeParts: [],
      entries: [{ kind: 'file', name: 'settings.json', data: Buffer.from('{}') }],
    });
  });

  it('refuses, in words: a directory in a list of files, two files of one name, a FIFO, too many entries, too many bytes, too deep, a home_path outside HOME', async () => {
    const src = settingsDir(join(dir, 'refusals'));
    const refused = (from: Parameters<typeof readSettings>[1]) => readSettings('a', from);
    await expect(refused({ source: [src], home_path: '.codex' })).rejects.toThrow(`source ${src} is not a regular file`);
    mkdirSync(join(dir, 'other'));
    writeFileSync(join(dir, 'other', 'config.toml'), '');
    await expect(refused({ source: [join(src, 'config.toml'), join(dir, 'other', 'config.toml')], home_path: '.codex' })).rejects.toThrow(
      'two files called config.toml',
    );
    await expect(refused({ source: src, home_path: '../elsewhere' })).rejects.toThrow('must stay inside');
    await expect(refused({ source: src, home_path: '/etc' })).rejects.toThrow('not absolute');

    const many = join(dir, 'many');
    mkdirSync(many);
    for (let i = 0; i <= SETTINGS_LIMITS.entries; i++) writeFileSync(join(many, `f${i}`), '');
    await expect(refused({ source: many, home_path: '.x' })).rejects.toThrow(`more than ${SETTINGS_LIMITS.entries} files and directories`);

    const big = join(dir, 'big');
    mkdirSync(big);
    writeFileSync(join(big, 'a'), Buffer.alloc(SETTINGS_LIMITS.bytes / 2));
    writeFileSync(join(big, 'b'), Buffer.alloc(SETTINGS_LIMITS.bytes / 2 + 1));
    await expect(refused({ source: big, home_path: '.x' })).rejects.toThrow('more than 4 MiB');

    const deep = join(dir, 'deep');
    mkdirSync(join(deep, ...Array.from({ length: SETTINGS_LIMITS.depth + 1 }, (_, i) => `d${i}`)), { recursive: true });
    await expect(refused({ source: deep, home_path: '.x' })).rejects.toThrow(`more than ${SETTINGS_LIMITS.depth} directories deep`);

    const fifoDir = join(dir, 'fifo');
    mkdirSync(fifoDir);
    execFileSync('mkfifo', [join(fifoDir, 'pipe')]);
    await expect(refused({ source: fifoDir, home_path: '.x' })).rejects.toThrow('is neither a file nor a directory');
  });
});

describe('settings_from where agents share lifecycle’s uid', () => {
  const dir = tmpStateDir();
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('gives an agent with settings its task’s home, never the user’s own; one without keeps the user’s', async () => {
    const workRoot = join(dir, 'work');
    mkdirSync(workRoot, { recursive: true });
    const iso = new AgentIsolation({ workRoot, uidRange: '29000-29001', setting: 'off', log, uidLockDir: join(dir, 'locks') });
    expect(iso.mode).toBe('same_uid');
    const settings = await readSettings('x', { source: settingsDir(join(dir, 'src')), home_path: '.codex' });
    const [ws, task] = [randomUUID(), randomUUID()];
    const placed = await iso.place(randomUUID(), ws, task, null, settings);
    expect(placed.home).toBe(taskHomeDir(workRoot, ws, task));
    expect(placed.home).not.toBe(process.env.HOME);
    expect(readFileSync(join(placed.home, '.codex', 'config.toml'), 'utf8')).toBe(CONFIG);
    expect(statSync(join(placed.home, '.codex', 'config.toml')).mode & 0o777).toBe(0o600);
    const plain = await iso.place(randomUUID(), randomUUID(), randomUUID(), null);
    expect(plain.home).toBe(process.env.HOME);
  });
});

describe("writeSettings with the lifecycle pod's capabilities", () => {
  const dir = tmpStateDir();
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('rewrites the settings in a home the last execution’s uid left behind, with CHOWN and DAC_READ_SEARCH but no DAC_OVERRIDE or FOWNER', () => {
    const src = settingsDir(join(dir, 'src'));
    // A home as a finished execution hands it back (deploy/base/lifecycle.yaml, docs/security.md):
    // root's 0700 at the top, its `.codex` still the old uid's 0700, with an edited config.
    const home = join(dir, 'home');
    const old = 29_977;
    mkdirSync(join(home, '.codex', 'prompts'), { recursive: true, mode: 0o700 });
    writeFileSync(join(home, '.codex', 'config.toml'), 'edited by the agent\n', { mode: 0o600 });
    for (const p of ['.codex', '.codex/prompts', '.codex/config.toml']) chownSync(join(home, p), old, old);
    chmodSync(join(home, '.codex'), 0o700);
    chmodSync(home, 0o700);
    // lifecycle's compiled module, run as root with exactly the pod's capabilities (setpriv), nothing else.
    const module = fileURLToPath(new URL('../dist/isolation/agent-settings.js', import.meta.url));
    const program = `
      import { openSync } from 'node:fs';
      const m = await import(${JSON.stringify(module)});
      const settings = await m.readSettings('x', { source: ${JSON.stringify(src)}, home_path: '.codex' });
      await m.writeSettings(openSync(${JSON.stringify(home)}, 'r'), settings);
      console.log('written');`;
    const out = execFileSync(
      'setpriv',
      ['--inh-caps=-all', '--bounding-set=-all,+setuid,+setgid,+chown,+kill,+dac_read_search', process.execPath, '--input-type=module', '-e', program],
      { encoding: 'utf8' },
    );
    expect(out.trim()).toBe('written');
    expect(readFileSync(join(home, '.codex', 'config.toml'), 'utf8')).toBe(CONFIG);
    expect(readFileSync(join(home, '.codex', 'prompts', 'review.md'), 'utf8')).toBe(PROMPT);
    // Root's until the home's chown hands it to the next execution (agent-isolation.ts place()).
    expect(statSync(join(home, '.codex'))).toMatchObject({ uid: 0, gid: 0 });
  });

  it('the same without DAC_READ_SEARCH is refused: the capability set above is the least that works', () => {
    const home = join(dir, 'home2');
    mkdirSync(join(home, '.codex'), { recursive: true, mode: 0o700 });
    chownSync(join(home, '.codex'), 29_977, 29_977);
    const module = fileURLToPath(new URL('../dist/isolation/agent-settings.js', import.meta.url));
    const program = `
      import { openSync } from 'node:fs';
      const m = await import(${JSON.stringify(module)});
      await m.writeSettings(openSync(${JSON.stringify(home)}, 'r'), { homeParts: ['.codex'], entries: [{ kind: 'file', name: 'a', data: Buffer.from('x') }] });`;
    expect(() =>
      execFileSync('setpriv', ['--inh-caps=-all', '--bounding-set=-all,+chown', process.execPath, '--input-type=module', '-e', program], { stdio: 'pipe' }),
    ).toThrow(/EACCES/);
  });
});
