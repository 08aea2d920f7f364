import { statSync } from 'node:fs';
import { delimiter, dirname, isAbsolute, join, relative, resolve as resolvePath } from 'node:path';

/*
 * Start-up checks (SPEC R-10.6, issue 54): where agents run under uids of their own, every path an
 * agentctl or agent needs must be reachable by a uid that is neither owner nor group of anything on
 * the way, i.e. by the "other" permission bits. A clone under /root (0700), or a KANDEV_STATE_DIR
 * inside a `mktemp -d` directory (0700), used to come up and then fail every launch ("Cannot find
 * module …agentctl.bundle.js", "working directory … does not exist"). lifecycle refuses to start
 * instead, naming the directory and the fix, and /readyz repeats the same check.
 *
 * Mode bits only: ACLs and LSMs are not consulted (an ACL that grants agents access is reported
 * as a problem, the safe side). Node-builtins only, so scripts/start.mjs can import it.
 */

export type Need = 'enter' | 'read' | 'exec';

export interface AgentTarget {
  path: string;
  need: Need;
  /** What it is, for the message: "KANDEV_WORK_DIR", "the agentctl bundle", "agent scripted-acp". */
  what: string;
  /** How to fix it besides chmod: what to move or set. */
  instead: string;
}

export interface AccessProblem {
  target: AgentTarget;
  /** The path that stops an agent uid: an ancestor it cannot enter, or the target itself. */
  blocked: string;
  /** Its permission bits, or null when it does not exist. */
  mode: number | null;
}

export interface StatLike {
  mode: number;
  isDirectory(): boolean;
  isFile(): boolean;
}

const statOrNull = (p: string): StatLike | null => {
  try {
    return statSync(p);
  } catch {
    return null;
  }
};

const OTHER = { enter: 0o001, read: 0o004, exec: 0o001 } as const;

/**
 * What stops an agent uid from reaching each target: every directory from `/` down needs o+x, the
 * target what `need` says (a directory to enter: o+x; a file to read: o+r; a program to run: o+x).
 * `fixable(dir)` names directories lifecycle makes (when missing) and makes traversable itself (its
 * state directory and what is inside it): they are not problems.
 */
export function agentAccessProblems(
  targets: readonly AgentTarget[],
  opts: { fixable?: (dir: string) => boolean; stat?: (p: string) => StatLike | null } = {},
): AccessProblem[] {
  const stat = opts.stat ?? statOrNull;
  const fixable = opts.fixable ?? (() => false);
  const problems: AccessProblem[] = [];
  for (const target of targets) {
    const chain: string[] = [];
    for (let d = dirname(target.path); ; d = dirname(d)) {
      chain.unshift(d);
      if (dirname(d) === d) break;
    }
    let blocked: AccessProblem | null = null;
    for (const dir of chain) {
      const st = stat(dir);
      // Not made yet, by lifecycle, which makes what it creates traversable: nothing to check below.
      if (!st && fixable(dir)) break;
      if (!st || !st.isDirectory()) {
        blocked = { target, blocked: dir, mode: st ? st.mode & 0o7777 : null };
        break;
      }
      if ((st.mode & 0o001) === 0 && !fixable(dir)) {
        blocked = { target, blocked: dir, mode: st.mode & 0o7777 };
        break;
      }
    }
    if (!blocked) {
      const st = stat(target.path);
      if (!st && fixable(target.path)) continue;
      const kindOk = st && (target.need === 'enter' ? st.isDirectory() : st.isFile());
      if (!st || !kindOk) blocked = { target, blocked: target.path, mode: st ? st.mode & 0o7777 : null };
      else if ((st.mode & OTHER[target.need]) === 0 && !(target.need === 'enter' && fixable(target.path)))
        blocked = { target, blocked: target.path, mode: st.mode & 0o7777 };
    }
    if (blocked) problems.push(blocked);
  }
  return problems;
}

/** One sentence per problem: the path, its mode, what it stops, and the two fixes. */
export function describeProblem(p: AccessProblem, uidRange: string): string {
  const { target, blocked, mode } = p;
  const who = `agent uids (${uidRange})`;
  if (mode === null)
    return `${target.what} ${target.path}: ${blocked} does not exist: create it where agents can enter (mkdir -p -m 755 ${blocked}), or ${target.instead}`;
  const octal = mode.toString(8).padStart(3, '0');
  if (blocked !== target.path)
    return `${who} cannot enter ${blocked} (mode ${octal}) on the way to ${target.what} ${target.path}: chmod o+x ${blocked}, or ${target.instead}`;
  const verb = { enter: 'enter', read: 'read', exec: 'run' }[target.need];
  const bit = { enter: 'o+x', read: 'o+r', exec: 'o+x' }[target.need];
  return `${who} cannot ${verb} ${target.what} ${target.path} (mode ${octal}): chmod ${bit} ${target.path}, or ${target.instead}`;
}

export function refusal(problems: readonly AccessProblem[], uidRange: string): string {
  return `agents could not work here (docs/security.md, "What an agent runs as"); refusing to start rather than fail every launch:\n${problems
    .map((p) => `  - ${describeProblem(p, uidRange)}`)
    .join('\n')}`;
}

/** `dir` is `root` or inside it. */
export const isInside = (root: string, dir: string): boolean => {
  const rel = relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !isAbsolute(rel));
};

/**
 * A command as an agent uid's execvp finds it: a path as it is, else the first PATH entry that has
 * it and that the agent can reach; when no reachable entry has it, the first that has it at all
 * (reported then), or null when none has it.
 */
export function resolveCommand(command: string, path: string | undefined, stat: (p: string) => StatLike | null = statOrNull): string | null {
  if (command.includes('/')) return command;
  let unreachable: string | null = null;
  for (const dir of (path ?? '').split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue;
    const candidate = join(dir, command);
    const st = stat(candidate);
    if (!st || !st.isFile() || (st.mode & 0o111) === 0) continue;
    const probe: AgentTarget = { path: candidate, need: 'exec', what: '', instead: '' };
    if (agentAccessProblems([probe], { stat }).length === 0) return candidate;
    unreachable ??= candidate;
  }
  return unreachable;
}

export interface AgentPaths {
  stateDir: string;
  workRoot: string;
  agentctlBin: string;
  /** The Node binary agentctl runs on (process.execPath). */
  nodeBin: string;
  /** The agents' commands and arguments (the catalogue); absolute arguments that are files are read by the agent. */
  agents: ReadonlyArray<{ name: string; command: string; args: readonly string[] }>;
  /** KANDEV_AGENT_CATALOGUE: agentctl reads it, as the agent's uid. */
  catalogueFile?: string | undefined;
  PATH?: string | undefined;
}

/** Everything an agentctl and its agent need to reach, as targets. */
export function agentTargets(p: AgentPaths, stat: (p: string) => StatLike | null = statOrNull): AgentTarget[] {
  const elsewhere = 'put the repository (or the image) where every user can read it (not under /root or a 0700 directory)';
  const targets: AgentTarget[] = [
    { path: p.stateDir, need: 'enter', what: 'KANDEV_STATE_DIR', instead: 'set KANDEV_STATE_DIR to a directory outside it' },
    { path: p.workRoot, need: 'enter', what: 'KANDEV_WORK_DIR', instead: 'set KANDEV_WORK_DIR (or KANDEV_STATE_DIR) to a directory outside it' },
    { path: p.nodeBin, need: 'exec', what: 'Node.js', instead: 'install Node.js where every user can run it' },
    { path: p.agentctlBin, need: 'read', what: 'the agentctl bundle', instead: elsewhere },
  ];
  if (p.catalogueFile)
    targets.push({ path: p.catalogueFile, need: 'read', what: 'KANDEV_AGENT_CATALOGUE', instead: 'put the catalogue file where every user can read it' });
  for (const agent of p.agents) {
    const command = resolveCommand(agent.command, p.PATH, stat);
    if (command && isAbsolute(command))
      targets.push({ path: command, need: 'exec', what: `agent ${agent.name}'s command`, instead: `install ${agent.command} where every user can run it` });
    for (const arg of agent.args) {
      if (!isAbsolute(arg)) continue;
      const st = stat(arg);
      if (st?.isFile()) targets.push({ path: arg, need: 'read', what: `agent ${agent.name}'s file`, instead: elsewhere });
    }
  }
  return targets;
}

/**
 * For `npm start` (scripts/start.mjs), before anything starts: the check lifecycle makes at its
 * start, on the paths lifecycle will use, so the refusal is the first thing said rather than a
 * service's start failure in a log tail. Root only (elsewhere agents share lifecycle's uid) and not
 * with AGENT_ISOLATION=off. Directories inside the state dir are not problems: lifecycle makes them
 * traversable itself. Returns the refusal's words, or null.
 */
export function preflight(opts: {
  env: NodeJS.ProcessEnv;
  stateDir: string;
  agentctlBin: string;
  agents: AgentPaths['agents'];
  euid: number | null;
}): string | null {
  const { env } = opts;
  if (opts.euid !== 0 || env.AGENT_ISOLATION === 'off') return null;
  const workRoot = env.KANDEV_WORK_DIR ? resolvePath(env.KANDEV_WORK_DIR) : join(opts.stateDir, 'work');
  const targets = agentTargets({
    stateDir: opts.stateDir,
    workRoot,
    agentctlBin: resolvePath(env.AGENTCTL_BIN || opts.agentctlBin),
    nodeBin: process.execPath,
    agents: opts.agents,
    catalogueFile: env.KANDEV_AGENT_CATALOGUE ? resolvePath(env.KANDEV_AGENT_CATALOGUE) : undefined,
    PATH: env.PATH,
  });
  const problems = agentAccessProblems(targets, { fixable: (d) => isInside(opts.stateDir, d) || isInside(workRoot, d) });
  return problems.length === 0 ? null : refusal(problems, env.AGENT_UID_RANGE || '20000-29999');
}
