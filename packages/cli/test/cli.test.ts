import { describe, expect, it } from 'vitest';
import { main } from '../src/cli.js';
import { table } from '../src/table.js';

/** Runs the CLI in-process against an address nothing listens on: usage errors never reach it. */
async function kandev(...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(
    args,
    { KANDEV_URL: 'http://127.0.0.1:9' },
    (s) => out.push(s),
    (s) => err.push(s),
  );
  return { code, out: out.join('\n'), err: err.join('\n') };
}

describe('kandev arguments', () => {
  it('exits 1 with the usage for what it cannot run, before any request', async () => {
    for (const args of [
      [],
      ['nope'],
      ['tasks'],
      ['tasks', 'ls'],
      ['task', 'show'],
      ['session', 'prompt', 'id'],
      ['tree', 'budget', 'id', '--set', '12.5'],
      ['tree', 'budget', 'id', '--set', '5', '--clear'],
      ['--workspace'],
    ]) {
      const r = await kandev(...args);
      expect({ args, code: r.code }).toEqual({ args, code: 1 });
      expect(r.err).toContain('usage: kandev');
    }
  });
  it('prints the usage for --help and exits 0', async () => {
    expect(await kandev('--help')).toMatchObject({ code: 0, out: expect.stringContaining('tree preview|pause|resume|cancel|restore') });
  });
  it('exits 3 when nothing answers at KANDEV_URL', async () => {
    const r = await kandev('workspaces');
    expect(r.code).toBe(3);
    expect(r.err).toContain('cannot reach http://127.0.0.1:9');
  });
});

describe('table', () => {
  it('aligns columns to the widest cell and leaves no trailing blanks', () => {
    expect(
      table(
        ['ID', 'TITLE'],
        [
          ['a', 'first'],
          ['longer-id', null],
        ],
      ),
    ).toBe('ID         TITLE\na          first\nlonger-id');
  });
});
