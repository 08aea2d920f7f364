import { isAbsolute, join, normalize, relative, resolve, sep } from 'node:path';

/*
 * Where agents work (SPEC ): every task has a directory of its own under KANDEV_WORK_DIR,
 * `<KANDEV_WORK_DIR>/<workspace_id>/<task_id>` by default, or the task's `working_dir` when it
 * names one under KANDEV_WORK_DIR. The orchestrator checks a `working_dir` when a task is created;
 * lifecycle checks it again before it creates and chowns the directory (defence in depth: the two
 * services may not share a filesystem, and lifecycle runs as root). Pure path rules, no I/O.
 */

/** KANDEV_WORK_DIR: the variable when set, else `<KANDEV_STATE_DIR>/work`; absolute either way. */
export function workDirRoot(env: { KANDEV_WORK_DIR?: string | undefined; KANDEV_STATE_DIR?: string | undefined }): string {
  if (env.KANDEV_WORK_DIR) return resolve(env.KANDEV_WORK_DIR);
  return resolve(env.KANDEV_STATE_DIR || '.kandev', 'work');
}

/** The default directory of a task. */
export function defaultTaskDir(root: string, workspaceId: string, taskId: string): string {
  return join(root, workspaceId, taskId);
}

/**
 * Agent homes live under this reserved name (`<root>/.homes/<workspace_id>/<task_id>`), which no
 * `working_dir` may name (no component of a working_dir starts with a dot).
 */
export function taskHomeDir(root: string, workspaceId: string, taskId: string): string {
  return join(root, '.homes', workspaceId, taskId);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export type WorkingDirCheck = { ok: true; path: string } | { ok: false; reason: string };

/**
 * A task's requested `working_dir`, checked as text against KANDEV_WORK_DIR (`root`, absolute):
 * absolute and already normalised (no `.`/`..` segments, no trailing slash, no `//`), strictly
 * under `root`, no component starting with a dot (that refuses `..` escapes and the reserved
 * `.homes`), not another workspace's area (a first component that is a workspace id other than
 * the task's own), under the task's own workspace directory, and not that whole directory itself (lifecycle chowns the directory
 * to each new execution, which would take every other task's directory of the workspace with it).
 */
export function checkWorkingDir(root: string, requested: string, workspaceId: string): WorkingDirCheck {
  if (!isAbsolute(requested)) return { ok: false, reason: 'working_dir must be an absolute path' };
  if (requested.includes('\0')) return { ok: false, reason: 'working_dir must not contain NUL' };
  const normal = normalize(requested);
  if (normal !== requested || requested.endsWith(sep)) return { ok: false, reason: `working_dir must be normalised (${normal.replace(/\/+$/, '')})` };
  const rel = relative(root, requested);
  if (rel === '' || rel.startsWith('..') || isAbsolute(rel)) return { ok: false, reason: `working_dir must be under KANDEV_WORK_DIR (${root})` };
  const parts = rel.split(sep);
  if (parts.some((p) => p.startsWith('.'))) return { ok: false, reason: 'working_dir must not have a component starting with "."' };
  // Only under the task's own workspace directory (INTERFACES.md): a directory outside every
  // workspace's would be shared by tasks of different workspaces, each execution taking it over.
  if (parts[0] !== workspaceId) {
    if (UUID.test(parts[0]!)) return { ok: false, reason: "working_dir must not be inside another workspace's directory" };
    return { ok: false, reason: `working_dir must be under the task's workspace directory (${join(root, workspaceId)}/)` };
  }
  if (parts.length === 1) return { ok: false, reason: "working_dir must not be the workspace's whole directory" };
  return { ok: true, path: requested };
}
