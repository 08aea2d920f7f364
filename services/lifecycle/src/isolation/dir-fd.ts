import { constants } from 'node:fs';
import { close, fchmod, fchown, fstat, lstat, mkdir, open, readdir } from 'node:fs';
import { promisify } from 'node:util';

/*
 * Files by descriptor (ADR 0056). lifecycle runs as root and changes the owner of directories an
 * agent has written to, so every path it follows there is the agent's to rewrite while it walks: a
 * walk by path strings (lstat, then lchown or readdir) can be made to follow a symbolic link that
 * was swapped in between the two calls (renameat2 RENAME_EXCHANGE), and hand a root-only file to
 * an agent. Here nothing below the work root is named by a full path: each level is opened from
 * its parent's descriptor with O_NOFOLLOW, and owners change with fchown on the opened descriptor.
 *
 * Node has no openat/fchownat. `/proc/self/fd/<dirfd>/<name>` stands in for openat(dirfd, name):
 * the kernel resolves the magic link `/proc/self/fd/<dirfd>` to the very directory the descriptor
 * holds (wherever it has been moved since, never through a path), and O_NOFOLLOW applies to the last
 * component, `name`, alone. So a symbolic link met anywhere is refused (ELOOP, or ENOTDIR with
 * O_DIRECTORY), never followed. `name` comes from readdir or from a checked path component: it has
 * no '/', and is never '.' or '..'.
 */

const pOpen = promisify(open);
const pClose = promisify(close);
const pFstat = promisify(fstat);
const pFchown = promisify(fchown);
const pFchmod = promisify(fchmod);
const pLstat = promisify(lstat);
const pMkdir = promisify(mkdir);
const pReaddir = promisify(readdir);

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;
const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
/** Regular files and FIFOs: O_NONBLOCK so opening a FIFO does not wait for a writer. */
const FILE_FLAGS = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY;

/**
 * A walk deeper than this is not followed further (its deeper entries keep their owners): each level
 * holds a descriptor while the walk is below it, and an agent could nest directories by the
 * thousand to exhaust them.
 */
export const MAX_DEPTH = 256;

/** The path through which a descriptor's directory is reached without a path of its own. */
export const at = (dirFd: number, name?: string): string => (name === undefined ? `/proc/self/fd/${dirFd}` : `/proc/self/fd/${dirFd}/${name}`);

/** A path that reaches something other than a directory through directories alone: a symbolic link, a file. */
export class RefusedPath extends Error {
  constructor(
    /** The component where the walk stopped, as the caller named it (root-relative). */
    readonly component: string,
    readonly why: 'symlink' | 'not_a_directory',
  ) {
    super(why === 'symlink' ? `${component} is a symbolic link` : `${component} is not a directory`);
  }
}

/** A valid single component: not empty, no '/', not '.' or '..', no NUL. */
export function isPlainName(name: string): boolean {
  return name !== '' && name !== '.' && name !== '..' && !name.includes('/') && !name.includes('\0');
}

/** Opens the trusted root (the configured work root: the operator's, so followed like any configured path). */
export async function openRoot(root: string): Promise<number> {
  return pOpen(root, O_RDONLY | O_DIRECTORY);
}

export async function closeFd(fd: number): Promise<void> {
  await pClose(fd).catch(() => undefined); // closing is all that is left to do with it
}

/**
 * openat(dirFd, name, O_DIRECTORY|O_NOFOLLOW). With `createMode`, a missing directory is made
 * first (mkdir does not follow a symbolic link in the last component either: it fails EEXIST) and
 * given exactly that mode, whatever the umask. Throws RefusedPath when `name` is a symbolic link or
 * not a directory; other errors (ENOENT without `createMode`, EACCES) as they are.
 */
export async function openDirAt(dirFd: number, name: string, createMode?: number, label = name): Promise<number> {
  if (!isPlainName(name)) throw new RefusedPath(label, 'not_a_directory');
  if (createMode !== undefined) {
    let created = true;
    await pMkdir(at(dirFd, name), createMode).catch((e: NodeJS.ErrnoException) => {
      if (e.code !== 'EEXIST') throw e;
      created = false;
    });
    const fd = await openDirStrict(dirFd, name, label);
    if (created) await pFchmod(fd, createMode);
    return fd;
  }
  return openDirStrict(dirFd, name, label);
}

async function openDirStrict(dirFd: number, name: string, label: string): Promise<number> {
  try {
    return await pOpen(at(dirFd, name), DIR_FLAGS);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ELOOP') throw new RefusedPath(label, 'symlink');
    if (code === 'ENOTDIR') {
      // O_DIRECTORY|O_NOFOLLOW on a symbolic link answers ENOTDIR: tell the two apart for the message.
      const st = await pLstat(at(dirFd, name)).catch(() => null);
      throw new RefusedPath(label, st?.isSymbolicLink() ? 'symlink' : 'not_a_directory');
    }
    throw e;
  }
}

/**
 * Walks `parts` down from `rootFd`, each level by descriptor (see openDirAt), and returns the last
 * level's descriptor (the caller closes it). Intermediate levels are closed on the way. With
 * `modes`, missing levels are created: `modes(i)` is the mode of level i.
 */
export async function openPathAt(rootFd: number, parts: readonly string[], modes?: (i: number) => number): Promise<number> {
  let fd = rootFd;
  try {
    for (let i = 0; i < parts.length; i++) {
      const next = await openDirAt(fd, parts[i]!, modes?.(i), parts.slice(0, i + 1).join('/'));
      if (fd !== rootFd) await closeFd(fd);
      fd = next;
    }
  } catch (e) {
    if (fd !== rootFd) await closeFd(fd);
    throw e;
  }
  if (fd === rootFd) throw new Error('openPathAt: an empty path names the root itself');
  return fd;
}

export interface Owner {
  uid: number;
  gid: number;
}

export interface ChownReport {
  /** Entries whose owner changed. */
  changed: number;
  /** Symbolic links met and left alone (neither followed nor chowned). */
  symlinks: number;
  /** Entries left with their owner on purpose: planted hard links, sockets, devices, too deep. */
  skipped: number;
}

/**
 * chown -R of the directory `dirFd` holds, by descriptor only: every directory is opened from its
 * parent's descriptor with O_NOFOLLOW|O_DIRECTORY and every regular file or FIFO with O_NOFOLLOW,
 * and the owner changes with fchown on that descriptor. A symbolic link anywhere is left as it is:
 * not followed and not chowned (its owner grants nothing; the agent may replace it anyway). An entry
 * that changes kind between listing and opening is taken as what the descriptor says, or skipped.
 *
 * A regular file with more than one link that no agent uid owns is left alone (`isAgentUid` says
 * which uids are agents'): it may be a hard link an agent planted to someone else's file (where
 * fs.protected_hardlinks is off), and chowning it would hand that file over. The check is made on
 * the opened descriptor, so the file checked is the file chowned.
 *
 * Sockets and device nodes are left with their owners: they cannot be opened without effects.
 */
export async function chownTreeAt(dirFd: number, to: Owner, isAgentUid: (uid: number) => boolean): Promise<ChownReport> {
  const report: ChownReport = { changed: 0, symlinks: 0, skipped: 0 };
  await chownDir(dirFd, to, isAgentUid, report, 0);
  return report;
}

async function chownDir(fd: number, to: Owner, isAgentUid: (uid: number) => boolean, report: ChownReport, depth: number): Promise<void> {
  const st = await pFstat(fd);
  if (st.uid !== to.uid || st.gid !== to.gid) {
    await pFchown(fd, to.uid, to.gid);
    report.changed++;
  }
  let names: string[];
  try {
    names = await pReaddir(at(fd));
  } catch (e) {
    // Removed meanwhile (by the agent of a previous execution still running): nothing to chown.
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw e;
  }
  for (const name of names) {
    let entry;
    try {
      entry = await pLstat(at(fd, name));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') continue;
      throw e;
    }
    if (entry.isSymbolicLink()) {
      report.symlinks++;
      continue;
    }
    if (entry.isDirectory()) {
      if (depth + 1 >= MAX_DEPTH) {
        report.skipped++;
        continue;
      }
      const child = await openChild(fd, name, DIR_FLAGS, report);
      if (child === null) continue;
      try {
        await chownDir(child, to, isAgentUid, report, depth + 1);
      } finally {
        await closeFd(child);
      }
      continue;
    }
    if (!entry.isFile() && !entry.isFIFO()) {
      report.skipped++;
      continue;
    }
    if (entry.uid === to.uid && entry.gid === to.gid) continue;
    const child = await openChild(fd, name, FILE_FLAGS, report);
    if (child === null) continue;
    try {
      const held = await pFstat(child);
      const planted = held.isFile() && held.nlink > 1 && !isAgentUid(held.uid);
      if (held.isDirectory()) {
        // Swapped for a directory since the listing (opened without O_DIRECTORY): walk it as one.
        if (depth + 1 < MAX_DEPTH) await chownDir(child, to, isAgentUid, report, depth + 1);
        else report.skipped++;
      } else if (planted || (!held.isFile() && !held.isFIFO())) report.skipped++;
      else if (held.uid !== to.uid || held.gid !== to.gid) {
        await pFchown(child, to.uid, to.gid);
        report.changed++;
      }
    } finally {
      await closeFd(child);
    }
  }
}

/** Opens an entry of a listed directory; null when it has gone or turned into a symbolic link (counted) since. */
async function openChild(dirFd: number, name: string, flags: number, report: ChownReport): Promise<number | null> {
  try {
    return await pOpen(at(dirFd, name), flags);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ELOOP' || code === 'ENOTDIR') {
      report.symlinks++;
      return null;
    }
    if (code === 'ENOENT') return null;
    // A socket swapped in (ENXIO), a FIFO's ENXIO cases: left alone.
    if (code === 'ENXIO' || code === 'EOPNOTSUPP') {
      report.skipped++;
      return null;
    }
    throw e;
  }
}

/** fstat + fchown of one held directory, if it is owned by `from` (a finished execution hands its directory back). */
export async function chownIfOwnedBy(fd: number, from: number, to: Owner): Promise<boolean> {
  const st = await pFstat(fd);
  if (st.uid !== from) return false;
  await pFchown(fd, to.uid, to.gid);
  return true;
}
