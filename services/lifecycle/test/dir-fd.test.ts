import { workerAgentUidRange } from '@kandev/testkit';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, chownSync, linkSync, lstatSync, mkdirSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chownTreeAt, closeFd, openPathAt, openRoot, RefusedPath } from '../src/isolation/dir-fd.js';
import { AgentIsolation } from '../src/isolation/agent-isolation.js';
import { eventually, log, tmpStateDir } from './helpers.js';

/*
 * Files by descriptor (ADR 0056, issue 53): lifecycle, as root, never follows a symbolic link an
 * agent put in its directories, even one swapped in while the walk runs. These tests need root
 * (the chown is the real thing) and fail loudly without it.
 */

const AGENT = 29_970; // an outside uid standing for an agent's; the walks below chown to others
const isAgentUid = (u: number) => u >= 20_000 && u <= 29_999;

/** Every path under `dir` (itself included) whose owner is not root, as `path uid`. */
function notRootOwned(dir: string): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    const st = lstatSync(p);
    if (st.uid !== 0 || st.gid !== 0) out.push(`${p} ${st.uid}`);
    if (st.isDirectory()) for (const n of readdirSync(p)) walk(join(p, n));
  };
  walk(dir);
  return out;
}

/** A directory outside every task's: root's, 0700, with a root-only file. What an attacker wants. */
function canary(base: string, name: string): { dir: string; file: string } {
  const dir = join(base, name);
  mkdirSync(dir, { mode: 0o700 });
  const file = join(dir, 'canary');
  writeFileSync(file, 'root only', { mode: 0o600 });
  return { dir, file };
}

describe('files by descriptor (ADR 0056)', { timeout: 180_000 }, () => {
  const base = tmpStateDir();
  const root = join(base, 'work');

  beforeAll(() => {
    if (process.getuid?.() !== 0) throw new Error('these tests need root: they chown for real (run them as root, as CI does)');
    // As prepareRoots makes a state directory: agents pass through, list nothing.
    chmodSync(base, 0o711);
    mkdirSync(root, { mode: 0o711 });
  });
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  it('opens each level without following a symbolic link, creating missing levels with the modes asked', async () => {
    const secrets = canary(base, 'secrets1');
    mkdirSync(join(root, 'a'));
    symlinkSync(secrets.dir, join(root, 'a', 'link'));
    writeFileSync(join(root, 'a', 'file'), '');
    const rootFd = await openRoot(root);
    try {
      const fd = await openPathAt(rootFd, ['a', 'new', 'deeper'], (i) => (i === 2 ? 0o700 : 0o711));
      await closeFd(fd);
      expect(statSync(join(root, 'a', 'new')).mode & 0o777).toBe(0o711);
      expect(statSync(join(root, 'a', 'new', 'deeper')).mode & 0o777).toBe(0o700);

      for (const [parts, why, component] of [
        [['a', 'link'], 'symlink', 'a/link'],
        [['a', 'link', 'x'], 'symlink', 'a/link'],
        [['a', 'file'], 'not_a_directory', 'a/file'],
        [['a', 'file', 'x'], 'not_a_directory', 'a/file'],
      ] as const) {
        const err = await openPathAt(rootFd, parts, () => 0o700).catch((e: unknown) => e);
        expect(err, parts.join('/')).toBeInstanceOf(RefusedPath);
        expect(err).toMatchObject({ why, component });
      }
      // Nothing was created behind the link.
      expect(readdirSync(secrets.dir)).toEqual(['canary']);
    } finally {
      await closeFd(rootFd);
    }
  });

  it('chowns a tree by descriptor: directories, files and FIFOs; symbolic links and planted hard links are left alone', async () => {
    const secrets = canary(base, 'secrets-c2');
    const task = join(root, 'tree');
    mkdirSync(join(task, 'src', 'deep'), { recursive: true });
    writeFileSync(join(task, 'src', 'deep', 'f'), 'x', { mode: 0o600 });
    writeFileSync(join(task, 'top'), 'x');
    symlinkSync(secrets.dir, join(task, 'to-dir'));
    symlinkSync(secrets.file, join(task, 'src', 'to-file'));
    // A hard link to a root-only file (as if fs.protected_hardlinks were off): not the agent's to get.
    linkSync(secrets.file, join(task, 'planted'));
    // An agent's own file with two links: an agent uid owns it, so it is chowned.
    writeFileSync(join(task, 'mine'), 'x');
    chownSync(join(task, 'mine'), AGENT, AGENT);
    linkSync(join(task, 'mine'), join(task, 'mine2'));
    spawnSyncOk('mkfifo', [join(task, 'fifo')]);

    const rootFd = await openRoot(root);
    const fd = await openPathAt(rootFd, ['tree']);
    const to = { uid: AGENT + 1, gid: AGENT + 1 };
    const report = await chownTreeAt(fd, to, isAgentUid);
    await closeFd(fd);
    await closeFd(rootFd);

    for (const p of ['', 'src', 'src/deep', 'src/deep/f', 'top', 'mine', 'fifo']) expect(statSync(join(task, p)), p).toMatchObject(to);
    for (const p of ['to-dir', 'src/to-file']) expect(lstatSync(join(task, p)).uid, p).toBe(0);
    expect(statSync(join(task, 'planted')).uid).toBe(0);
    expect(notRootOwned(secrets.dir)).toEqual([]);
    expect(report).toMatchObject({ symlinks: 2, skipped: 1 });
    // Again: nothing left to change.
    const again = await openRoot(root);
    const fd2 = await openPathAt(again, ['tree']);
    expect((await chownTreeAt(fd2, to, isAgentUid)).changed).toBe(0);
    await closeFd(fd2);
    await closeFd(again);
  });

  it('the symlink race: an agent swapping a directory and a symbolic link in its task directory, thousands of times, while prepares run; no file outside changes owner', async () => {
    const range = workerAgentUidRange() ?? '29980-29989';
    const iso = new AgentIsolation({ workRoot: root, uidRange: range, setting: 'auto', log });
    expect(iso.mode).toBe('uid_per_execution');
    const secrets = canary(base, 'secrets-c3');
    const ws = randomUUID();
    const taskId = randomUUID();
    // The first execution of the task: its agent (uid A) prepares the swap.
    const first = await iso.place(randomUUID(), ws, taskId, null);
    const agentUid = first.identity!.uid;
    const taskDir = first.cwd;
    // A directory of its own, world-writable, so it can go on renaming in it after later executions
    // took the task directory over (it holds a descriptor of it; no search of the 0700 parent needed).
    const arena = join(taskDir, 'x');
    mkdirSync(join(arena, 'd', 'sub'), { recursive: true });
    for (let i = 0; i < 50; i++) writeFileSync(join(arena, 'd', `f${i}`), 'x');
    writeFileSync(join(arena, 'd', 'sub', 'g'), 'x');
    symlinkSync(secrets.dir, join(arena, 'l'));
    chmodSync(arena, 0o777);
    spawnSyncOk('chown', ['-R', '-h', `${agentUid}:${agentUid}`, arena]);

    const swapper = spawn('python3', ['-c', SWAPPER, arena], { uid: agentUid, gid: agentUid, cwd: '/', stdio: ['ignore', 'pipe', 'pipe'] });
    let swaps = 0;
    let swapperErr = '';
    createInterface({ input: swapper.stdout }).on('line', (l) => (swaps = Number(l)));
    swapper.stderr.on('data', (d) => (swapperErr += String(d)));
    let prepares = 0;
    // A prepare the race made fail is checked last: first, whether anything outside changed owner.
    const failures: string[] = [];
    try {
      await eventually(
        () => swaps,
        (n) => n > 0 || swapperErr !== '',
        10_000,
      );
      expect(swapperErr).toBe('');
      const swapsAtStart = swaps;
      // A second (third, …) session of the same task launches, over and over: each prepare walks the
      // task directory by descriptor and chowns it to the new execution's uid, then hands it back.
      while (prepares < 40 || swaps - swapsAtStart < 5_000) {
        prepares++;
        const p = await iso.place(randomUUID(), ws, taskId, null).catch((e: Error) => void failures.push(e.message));
        if (!p) continue;
        expect(p.identity!.uid).not.toBe(agentUid);
        await iso.finish(p);
        expect(swapperErr).toBe('');
      }
      // The walk did go through the swapped entries (the directory, wherever it was at the time).
      expect(prepares).toBeGreaterThanOrEqual(40);
      expect(swaps - swapsAtStart).toBeGreaterThanOrEqual(5_000);
    } finally {
      swapper.kill('SIGKILL');
    }
    expect(notRootOwned(secrets.dir)).toEqual([]);
    expect(statSync(secrets.file)).toMatchObject({ uid: 0, gid: 0 });
    expect(statSync(secrets.file).mode & 0o777).toBe(0o600);
    // And the race did not make a launch fail either: entries that vanish or change kind are skipped.
    expect(failures).toEqual([]);
    await iso.finish(first);
  });

  it('working_dir through a symbolic link, a file, another workspace or no workspace: refused, and no file changes owner', async () => {
    const iso = new AgentIsolation({ workRoot: root, uidRange: workerAgentUidRange() ?? '29980-29989', setting: 'auto', log });
    const ws = randomUUID();
    const other = randomUUID();
    const secrets = canary(base, 'secrets-c4');
    mkdirSync(join(root, ws, 'repo'), { recursive: true });
    symlinkSync(secrets.dir, join(root, ws, 'link'));
    symlinkSync(secrets.dir, join(root, ws, 'repo', 'inner-link'));
    writeFileSync(join(root, ws, 'a-file'), '');
    // Another workspace's directory, with a file of one of its agents; and a directory outside any.
    mkdirSync(join(root, other, 'theirs'), { recursive: true });
    writeFileSync(join(root, other, 'theirs', 'private'), 'x', { mode: 0o600 });
    mkdirSync(join(root, 'shared-repo'));
    const before = [...notRootOwned(root), ...notRootOwned(secrets.dir)];

    for (const wd of [
      join(root, ws, 'link'),
      join(root, ws, 'link', 'below'),
      join(root, ws, 'repo', 'inner-link'),
      join(root, ws, 'a-file'),
      join(root, other, 'theirs'),
      join(root, 'shared-repo'),
      secrets.dir,
      join(root, ws),
    ]) {
      const err = await iso.place(randomUUID(), ws, randomUUID(), wd).catch((e: unknown) => e);
      expect(err, wd).toMatchObject({ code: 'VALIDATION_ERROR' });
    }
    expect([...notRootOwned(root), ...notRootOwned(secrets.dir)]).toEqual(before);
    expect(readdirSync(secrets.dir)).toEqual(['canary']);

    // A plain directory of the workspace is fine, and becomes the execution's. A symbolic link an
    // agent left as its home's tmp is left alone, not followed, and does not stop the launch.
    const taskId = randomUUID();
    mkdirSync(join(root, '.homes', ws, taskId), { recursive: true });
    symlinkSync(secrets.dir, join(root, '.homes', ws, taskId, 'tmp'));
    const ok = await iso.place(randomUUID(), ws, taskId, join(root, ws, 'repo'));
    expect(statSync(join(root, ws, 'repo')).uid).toBe(ok.identity!.uid);
    expect(lstatSync(join(root, ws, 'repo', 'inner-link')).uid).toBe(0);
    expect(notRootOwned(secrets.dir)).toEqual([]);
    await iso.finish(ok);
    expect(statSync(join(root, ws, 'repo')).uid).toBe(0);
  });
});

/**
 * The attacker: renameat2(RENAME_EXCHANGE) of `d` (a directory) and `l` (a symbolic link to the
 * secrets) in a loop, by descriptor of their parent; prints its count every 500 swaps.
 */
const SWAPPER = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
n = 0
while True:
    if libc.renameat2(fd, b"d", fd, b"l", 2) != 0:
        sys.stderr.write("renameat2: " + os.strerror(ctypes.get_errno()) + "\\n"); sys.exit(1)
    n += 1
    if n % 500 == 0:
        print(n, flush=True)
`;

function spawnSyncOk(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`${cmd} failed: ${r.stderr}`);
}
