import { describe, expect, it } from 'vitest';
import { checkWorkingDir, defaultTaskDir, taskHomeDir, workDirRoot } from '../src/workdir.js';

const root = '/srv/kandev/work';
const ws = '11111111-1111-4111-8111-111111111111';
const other = '22222222-2222-4222-8222-222222222222';

describe('work directories', () => {
  it('KANDEV_WORK_DIR defaults to <KANDEV_STATE_DIR>/work, made absolute', () => {
    expect(workDirRoot({ KANDEV_WORK_DIR: '/x/y' })).toBe('/x/y');
    expect(workDirRoot({ KANDEV_STATE_DIR: '/s' })).toBe('/s/work');
    expect(workDirRoot({})).toBe(`${process.cwd()}/.kandev/work`);
    expect(workDirRoot({ KANDEV_WORK_DIR: 'rel' })).toBe(`${process.cwd()}/rel`);
  });

  it('a task directory and its home', () => {
    expect(defaultTaskDir(root, ws, 't')).toBe(`${root}/${ws}/t`);
    expect(taskHomeDir(root, ws, 't')).toBe(`${root}/.homes/${ws}/t`);
  });

  it.each([
    [`${root}/${ws}/repo`, true],
    [`${root}/${ws}/a/b/c`, true],
    // Outside every workspace's directory: shared between workspaces, refused (INTERFACES.md).
    [`${root}/repo`, false],
    [`${root}/a/b/c`, false],
    ['relative/path', false],
    [root, false],
    [`${root}/`, false],
    [`${root}/repo/`, false],
    [`${root}/../etc`, false],
    [`${root}/a/../../etc`, false],
    [`${root}/a/./b`, false],
    [`${root}//a`, false],
    ['/etc', false],
    ['/srv/kandev/workspace', false],
    [`${root}/.homes/${ws}/t`, false],
    [`${root}/${ws}/a/.git`, false],
    [`${root}/${ws}/../${other}/t`, false],
    [`${root}/${other}/t`, false],
    [`${root}/${ws}`, false],
    [`${root}/${ws}/a\0b`, false],
  ])('%s → allowed %s', (path, ok) => {
    expect(checkWorkingDir(root, path, ws).ok).toBe(ok);
  });

  it('says why, naming the workspace directory a working_dir must be under', () => {
    expect(checkWorkingDir(root, `${root}/repo`, ws)).toEqual({
      ok: false,
      reason: `working_dir must be under the task's workspace directory (${root}/${ws}/)`,
    });
    expect(checkWorkingDir(root, `${root}/${other}/t`, ws)).toEqual({ ok: false, reason: "working_dir must not be inside another workspace's directory" });
  });
});
