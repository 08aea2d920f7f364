/*
 * Where this process's cpu cgroup is, the plain rule behind the stopping cpu group
 * (isolation/stopping-cpu.ts, ADR 0046).
 */

export interface CpuCgroup {
  version: 1 | 2;
  /** This process's own cpu cgroup, as a directory of the mounted hierarchy. */
  dir: string;
}

/**
 * This process's cpu cgroup from /proc/self/mountinfo and /proc/self/cgroup: in the v1 hierarchy
 * whose mount carries the `cpu` controller, else in the v2 one (whether its cpu controller can be
 * enabled for a child is for the caller to find out). Paths are taken relative to the mount's own
 * root (a container's cgroup namespace shows its cgroup as `/`).
 */
export function findCpuCgroup(mountinfo: string, cgroupFile: string): CpuCgroup | { reason: string } {
  const mounts = mountinfo
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [pre, post] = line.split(' - ');
      const f = (pre ?? '').split(' ');
      const [fstype, , superOptions] = (post ?? '').split(' ');
      return { root: unescapeMount(f[3] ?? ''), point: unescapeMount(f[4] ?? ''), fstype, options: (superOptions ?? '').split(',') };
    });
  const entries = cgroupFile
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [, controllers, ...path] = line.split(':');
      return { controllers: (controllers ?? '').split(','), path: path.join(':') };
    });

  const v1 = mounts.find((m) => m.fstype === 'cgroup' && m.options.includes('cpu'));
  const v1Path = entries.find((e) => e.controllers.includes('cpu'))?.path;
  if (v1 && v1Path !== undefined) return { version: 1, dir: within(v1.point, v1.root, v1Path) };

  const v2 = mounts.find((m) => m.fstype === 'cgroup2');
  const v2Path = entries.find((e) => e.controllers.length === 1 && e.controllers[0] === '')?.path;
  if (v2 && v2Path !== undefined) return { version: 2, dir: within(v2.point, v2.root, v2Path) };
  return { reason: 'no cpu cgroup hierarchy is mounted' };
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
