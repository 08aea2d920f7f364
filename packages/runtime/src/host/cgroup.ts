import { mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/*
 * cpu cgroups, v1 and v2: where this process's is (a plain rule over /proc/self/mountinfo and
 * /proc/self/cgroup), and a child group made under it at the default weight. The lifecycle's
 * stopping cpu group is one (ADR 0046).
 */

export interface CpuCgroup {
  version: 1 | 2;
  /** This process's own cpu cgroup, as a directory of the mounted hierarchy. */
  dir: string;
}

/** One line of /proc/<pid>/cgroup: `hierarchy-id:controllers:path` (v2's line has no controllers). */
export interface CgroupEntry {
  controllers: string[];
  path: string;
}

/** /proc/<pid>/cgroup as its entries. */
export function parseCgroupFile(text: string): CgroupEntry[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [, controllers, ...path] = line.split(':');
      return { controllers: controllers ? controllers.split(',') : [], path: path.join(':') };
    });
}

interface Mount {
  root: string;
  point: string;
  fstype: string;
  options: string[];
}

/** /proc/<pid>/mountinfo as its mounts (proc(5): the fields before ` - `, then fstype, source and super options). */
export function parseMountinfo(text: string): Mount[] {
  return text
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [pre, post] = line.split(' - ');
      const f = (pre ?? '').split(' ');
      const [fstype, , superOptions] = (post ?? '').split(' ');
      return { root: unescapeMount(f[3] ?? ''), point: unescapeMount(f[4] ?? ''), fstype: fstype ?? '', options: (superOptions ?? '').split(',') };
    });
}

/**
 * This process's cpu cgroup from /proc/self/mountinfo and /proc/self/cgroup: in the v1 hierarchy
 * whose mount carries the `cpu` controller, else in the v2 one (whether its cpu controller can be
 * enabled for a child is for the caller to find out). Paths are taken relative to the mount's own
 * root (a container's cgroup namespace shows its cgroup as `/`).
 */
export function findCpuCgroup(mountinfo: string, cgroupFile: string): CpuCgroup | { reason: string } {
  const mounts = parseMountinfo(mountinfo);
  const entries = parseCgroupFile(cgroupFile);

  const v1 = mounts.find((m) => m.fstype === 'cgroup' && m.options.includes('cpu'));
  const v1Path = entries.find((e) => e.controllers.includes('cpu'))?.path;
  if (v1 && v1Path !== undefined) return { version: 1, dir: within(v1.point, v1.root, v1Path) };

  const v2 = mounts.find((m) => m.fstype === 'cgroup2');
  const v2Path = entries.find((e) => e.controllers.length === 0)?.path;
  if (v2 && v2Path !== undefined) return { version: 2, dir: within(v2.point, v2.root, v2Path) };
  return { reason: 'no cpu cgroup hierarchy is mounted' };
}

/** This process's cpu cgroup as /proc shows it (`procSelf`: another directory laid out the same, for tests). */
export function ownCpuCgroup(procSelf = '/proc/self'): CpuCgroup | { reason: string } {
  try {
    return findCpuCgroup(readFileSync(join(procSelf, 'mountinfo'), 'utf8'), readFileSync(join(procSelf, 'cgroup'), 'utf8'));
  } catch (err) {
    return { reason: `cannot read ${procSelf}: ${(err as Error).message}` };
  }
}

/**
 * A child cpu group `name` of `parent`, made (or found) at the default weight, with its
 * cgroup.procs open for writing: each write(2) of a pid moves that process. Or why there is none
 * (a read-only /sys/fs/cgroup, as in most containers; a v2 parent that holds processes itself).
 */
export function makeCpuGroup(parent: CpuCgroup, name: string): { dir: string; procsFd: number } | { reason: string } {
  const dir = join(parent.dir, name);
  try {
    if (parent.version === 2) {
      // v2 shares the cpu between children only once the parent enables the controller for them
      // (refused when the parent holds processes itself, unless it is the root: then there is no group).
      if (!readFileSync(join(parent.dir, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('cpu'))
        writeFileSync(join(parent.dir, 'cgroup.subtree_control'), '+cpu');
    }
    mkdirSync(dir, { recursive: true });
    // The default weight, written in case the group was left with another one.
    if (parent.version === 1) writeFileSync(join(dir, 'cpu.shares'), '1024');
    else writeFileSync(join(dir, 'cpu.weight'), '100');
    // Node opens it close-on-exec, as every file it opens: no child inherits a handle that could move processes.
    return { dir, procsFd: openSync(join(dir, 'cgroup.procs'), 'w') };
  } catch (err) {
    return { reason: `${dir}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}` };
  }
}

/** A cgroup path as a directory under a mount whose own root is `root`. */
function within(point: string, root: string, path: string): string {
  const rel = root !== '/' && path.startsWith(root) ? path.slice(root.length) : path;
  return `${point}${rel === '/' ? '' : rel}`.replace(/\/+$/, '') || '/';
}

/** mountinfo escapes space, tab, newline and backslash as octal (\040 and so on). */
function unescapeMount(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}
