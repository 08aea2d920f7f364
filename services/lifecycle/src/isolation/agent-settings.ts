import { homePathParts, loadCatalogue, type SettingsFrom } from '@kandev/agentctl';
import { constants } from 'node:fs';
import { close, fchmod, fchown, fstat, lstat, open, readdir, read, rm, unlink, write } from 'node:fs';
import { basename } from 'node:path';
import { promisify } from 'node:util';
import { at, closeFd, openDirAt, RefusedPath } from './dir-fd.js';

/*
 * A catalogue entry's `settings_from` (docs/agents.md, "Settings"): read-only settings copied into
 * each execution's own home before its agent starts. Under root every execution has a uid and a
 * home of its own (ADR 0017), so one settings directory shared by all of them (CODEX_HOME=/shared)
 * works for the first and is `Permission denied` for the next; a copy per execution is what the
 * agents' own docs assume, a home with their settings in it.
 *
 * Two halves, so that everything that can be refused is refused before a uid is taken:
 * - `readSettings` reads the source into memory (lifecycle reads it as root, so the source may be
 *   root-only: a key file never needs to be readable by agent uids). What the catalogue names is
 *   the operator's own path and is followed like any configured path (a Kubernetes ConfigMap
 *   volume's files are symbolic links); what lies inside a named directory is walked by descriptor
 *   and a symbolic link there is refused, never followed, so a link to a root-only file cannot put
 *   that file into an agent's home. Bounded (SETTINGS_LIMITS): settings, not a data set.
 * - `writeSettings` writes it below the home by descriptor (dir-fd.ts, ADR 0056), before the home
 *   is chowned to the execution's uid: at that moment the home is root's and 0700 (a new one, or
 *   one a finished execution handed back), so no agent can race the copy; the chown that follows
 *   makes every copied file the execution's. Directories 0700, files 0600, whatever the umask.
 */

/** The bounds of one entry's settings; past them the start or the launch is refused. */
export const SETTINGS_LIMITS = {
  /** Files and directories, together. */
  entries: 256,
  /** Sum of the files' sizes. */
  bytes: 4 * 1024 * 1024,
  /** Directory levels below the source directory. */
  depth: 8,
} as const;

export type SettingsEntry = { kind: 'dir'; name: string; entries: SettingsEntry[] } | { kind: 'file'; name: string; data: Buffer };

/** What one execution's home gets: `entries` below `HOME/<homeParts...>`. */
export interface AgentSettings {
  homeParts: string[];
  entries: SettingsEntry[];
}

/** A settings source that cannot be used, in words that name the agent and the path. */
export class SettingsError extends Error {}

const pOpen = promisify(open);
const pClose = promisify(close);
const pFstat = promisify(fstat);
const pFchmod = promisify(fchmod);
const pFchown = promisify(fchown);
const pLstat = promisify(lstat);
const pReaddir = promisify(readdir);
const pRead = promisify(read);
const pWrite = promisify(write);
const pUnlink = promisify(unlink);
const pRm = promisify(rm);

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;

class Budget {
  entries = 0;
  bytes = 0;
  constructor(readonly where: string) {}
  entry(): void {
    if (++this.entries > SETTINGS_LIMITS.entries) throw new SettingsError(`${this.where} holds more than ${SETTINGS_LIMITS.entries} files and directories`);
  }
  take(size: number): void {
    this.bytes += size;
    if (this.bytes > SETTINGS_LIMITS.bytes) throw new SettingsError(`${this.where} holds more than ${SETTINGS_LIMITS.bytes / 1024 / 1024} MiB`);
  }
}

/** Reads an agent's settings source, whole, or throws SettingsError saying what is wrong with it. */
export async function readSettings(agent: string, from: SettingsFrom): Promise<AgentSettings> {
  const where = `agent "${agent}": settings_from`;
  const homeParts = homePathParts(from.home_path);
  if (typeof homeParts === 'string') throw new SettingsError(`${where} home_path ${homeParts}`);
  const budget = new Budget(where);
  const entries: SettingsEntry[] = [];
  if (typeof from.source === 'string') {
    const fd = await openSource(where, from.source);
    try {
      const st = await pFstat(fd);
      if (st.isDirectory()) entries.push(...(await readDir(fd, from.source, budget, 0)));
      else entries.push(await readNamedFile(where, fd, from.source, budget));
    } finally {
      await closeFd(fd);
    }
  } else {
    const names = new Set<string>();
    for (const path of from.source) {
      const name = basename(path);
      if (names.has(name)) throw new SettingsError(`${where} source names two files called ${name}: they would land on the same path`);
      names.add(name);
      const fd = await openSource(where, path);
      try {
        entries.push(await readNamedFile(where, fd, path, budget));
      } finally {
        await closeFd(fd);
      }
    }
  }
  return { homeParts, entries };
}

/** Start-up: what is wrong with each catalogue entry's settings source, one sentence each. */
export async function catalogueSettingsProblems(env: NodeJS.ProcessEnv): Promise<string[]> {
  const problems: string[] = [];
  for (const agent of loadCatalogue(env).values()) {
    if (!agent.settings_from) continue;
    try {
      await readSettings(agent.name, agent.settings_from);
    } catch (e) {
      if (!(e instanceof SettingsError)) throw e;
      problems.push(e.message);
    }
  }
  return problems;
}

async function openSource(where: string, path: string): Promise<number> {
  try {
    // O_NONBLOCK: a FIFO named by mistake must not hang the start waiting for a writer.
    return await pOpen(path, O_RDONLY | O_NONBLOCK | O_NOCTTY);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new SettingsError(`${where} source ${path} does not exist`);
    throw new SettingsError(`${where} source ${path} cannot be read (${code ?? (e as Error).message})`);
  }
}

async function readNamedFile(where: string, fd: number, path: string, budget: Budget): Promise<SettingsEntry> {
  const st = await pFstat(fd);
  if (!st.isFile())
    throw new SettingsError(`${where} source ${path} is not a regular file${st.isDirectory() ? ' (a list names files; name a directory alone)' : ''}`);
  budget.entry();
  return { kind: 'file', name: basename(path), data: await readHeld(fd, path, budget) };
}

async function readDir(dirFd: number, path: string, budget: Budget, depth: number): Promise<SettingsEntry[]> {
  let names: string[];
  try {
    names = (await pReaddir(at(dirFd))).sort();
  } catch (e) {
    throw new SettingsError(`${budget.where} source ${path} cannot be listed (${(e as NodeJS.ErrnoException).code})`);
  }
  const out: SettingsEntry[] = [];
  for (const name of names) {
    const full = `${path}/${name}`;
    const st = await pLstat(at(dirFd, name));
    if (st.isSymbolicLink())
      throw new SettingsError(
        `${budget.where} source ${full} is a symbolic link, which is never followed inside a settings directory (list the files themselves as source: a ConfigMap volume's files are links)`,
      );
    budget.entry();
    if (st.isDirectory()) {
      if (depth + 1 > SETTINGS_LIMITS.depth) throw new SettingsError(`${budget.where} source ${full} is more than ${SETTINGS_LIMITS.depth} directories deep`);
      const child = await openIn(dirFd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, full, budget);
      try {
        out.push({ kind: 'dir', name, entries: await readDir(child, full, budget, depth + 1) });
      } finally {
        await closeFd(child);
      }
    } else if (st.isFile()) {
      const child = await openIn(dirFd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, full, budget);
      try {
        // Checked again on the descriptor: the file read is the file checked.
        if (!(await pFstat(child)).isFile()) throw new SettingsError(`${budget.where} source ${full} changed while it was read`);
        out.push({ kind: 'file', name, data: await readHeld(child, full, budget) });
      } finally {
        await closeFd(child);
      }
    } else {
      throw new SettingsError(`${budget.where} source ${full} is neither a file nor a directory`);
    }
  }
  return out;
}

async function openIn(dirFd: number, name: string, flags: number, full: string, budget: Budget): Promise<number> {
  try {
    return await pOpen(at(dirFd, name), flags);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') throw new SettingsError(`${budget.where} source ${full} became a symbolic link while it was read`);
    throw new SettingsError(`${budget.where} source ${full} cannot be read (${code})`);
  }
}

/** The whole file behind `fd`, counted against the budget as it is read (a file that grows is caught too). */
async function readHeld(fd: number, path: string, budget: Budget): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for (;;) {
    const buf = Buffer.alloc(64 * 1024);
    let n: number;
    try {
      ({ bytesRead: n } = await pRead(fd, buf, 0, buf.length, null));
    } catch (e) {
      throw new SettingsError(`${budget.where} source ${path} cannot be read (${(e as NodeJS.ErrnoException).code})`);
    }
    if (n === 0) return Buffer.concat(chunks);
    budget.take(n);
    chunks.push(buf.subarray(0, n));
  }
}

/**
 * Writes `settings` below the home `homeFd` holds (see the top of this file for why this is safe
 * before the chown). What is there already is replaced: a settings file the last execution of the
 * task edited, or swapped for a link or a directory, is written anew; anything else in the home (the
 * agent's own state, its history) stays.
 */
export async function writeSettings(homeFd: number, settings: AgentSettings): Promise<void> {
  let fd = homeFd;
  try {
    for (const part of settings.homeParts) {
      const next = await dirAt(fd, part);
      if (fd !== homeFd) await closeFd(fd);
      fd = next;
    }
    await writeEntries(fd, settings.entries);
  } finally {
    if (fd !== homeFd) await closeFd(fd);
  }
}

async function writeEntries(dirFd: number, entries: readonly SettingsEntry[]): Promise<void> {
  for (const e of entries) {
    if (e.kind === 'dir') {
      const fd = await dirAt(dirFd, e.name);
      try {
        await writeEntries(fd, e.entries);
      } finally {
        await closeFd(fd);
      }
    } else {
      await removeAt(dirFd, e.name);
      const fd = await pOpen(at(dirFd, e.name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
      try {
        for (let off = 0; off < e.data.length;) off += (await pWrite(fd, e.data, off, e.data.length - off)).bytesWritten;
        await pFchmod(fd, 0o600);
      } finally {
        await pClose(fd);
      }
    }
  }
}

/**
 * A directory below `dirFd`, made or reused, this process's and 0700 until the home's chown; a link or a
 * file in its place is removed first. A reused one (the last execution's `.codex`) still belongs to
 * that execution's uid with 0700: the lifecycle pod's root has DAC_READ_SEARCH and CHOWN but not
 * DAC_OVERRIDE or FOWNER (deploy/base/lifecycle.yaml), so it could open that directory but neither
 * write in it nor chmod it. Taken back first (fchown, on the descriptor), it can.
 */
async function dirAt(dirFd: number, name: string): Promise<number> {
  let fd: number;
  try {
    fd = await openDirAt(dirFd, name, 0o700);
  } catch (e) {
    if (!(e instanceof RefusedPath)) throw e;
    await removeAt(dirFd, name);
    fd = await openDirAt(dirFd, name, 0o700);
  }
  try {
    // This process's own ids: root in the pod; where agents share lifecycle's uid it owns them already.
    const st = await pFstat(fd);
    const [uid, gid] = [process.geteuid!(), process.getegid!()];
    if (st.uid !== uid || st.gid !== gid) await pFchown(fd, uid, gid);
    await pFchmod(fd, 0o700);
  } catch (e) {
    await closeFd(fd);
    throw e;
  }
  return fd;
}

/** Whatever is at `name` below `dirFd` goes: unlink never follows a link, and a directory goes whole. */
async function removeAt(dirFd: number, name: string): Promise<void> {
  try {
    await pUnlink(at(dirFd, name));
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return;
    if (code !== 'EISDIR') throw e;
    await pRm(at(dirFd, name), { recursive: true, force: true });
  }
}
