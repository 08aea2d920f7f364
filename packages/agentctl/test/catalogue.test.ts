import { describe, expect, it } from 'vitest';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CATALOGUE_ENV, loadCatalogue, resolveAgent } from '../src/catalogue.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

describe('the default agent catalogue', () => {
  it('lists the scripted agents in a repository checkout, where testkit is installed', () => {
    const catalogue = loadCatalogue({ PATH: '' });
    expect([...catalogue.keys()].sort()).toEqual(['scripted-acp', 'scripted-codex']);
    expect(resolveAgent('scripted-acp', { PATH: '' }).args[0]).toMatch(/testkit[/\\]dist[/\\]agents[/\\]scripted-acp\.bundle\.js$/);
  });

  it('loads without testkit (a production image) and lists no scripted agent', () => {
    // The compiled catalogue, alone in a tree that has its runtime dependencies but no testkit.
    const tree = mkdtempSync(join(tmpdir(), 'kandev-catalogue-'));
    try {
      const dist = join(tree, 'packages', 'agentctl', 'dist');
      mkdirSync(dist, { recursive: true });
      copyFileSync(join(root, 'packages', 'agentctl', 'dist', 'catalogue.js'), join(dist, 'catalogue.js'));
      mkdirSync(join(tree, 'node_modules', '@kandev'), { recursive: true });
      symlinkSync(join(root, 'node_modules', 'zod'), join(tree, 'node_modules', 'zod'));
      symlinkSync(join(root, 'packages', 'contracts'), join(tree, 'node_modules', '@kandev', 'contracts'));
      symlinkSync(join(root, 'packages', 'runtime'), join(tree, 'node_modules', '@kandev', 'runtime'));
      const script = `import('${join(dist, 'catalogue.js')}').then((m) => { const c = m.loadCatalogue({ PATH: '' }); console.log(JSON.stringify([...c.keys()])); try { m.resolveAgent('scripted-acp', { PATH: '' }); } catch (e) { console.log(e.message); } })`;
      const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' }).trim().split('\n');
      expect(JSON.parse(out[0]!)).toEqual([]);
      expect(out[1]).toMatch(/unknown agent "scripted-acp"/);
    } finally {
      rmSync(tree, { recursive: true, force: true });
    }
  });

  it('refuses a node script bundle older than a module it was made from, saying what to run (ADR 0052)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kandev-catalogue-'));
    try {
      const bundle = join(dir, 'agent.bundle.js');
      const at = (path: string, seconds: number) => {
        writeFileSync(path, '');
        utimesSync(path, seconds, seconds);
      };
      at(join(dir, 'agent.js'), 2_000);
      at(bundle, 1_000);
      writeFileSync(`${bundle}.inputs.json`, JSON.stringify({ inputs: ['agent.js'] }));
      const file = join(dir, 'catalogue.json');
      writeFileSync(file, JSON.stringify({ mine: { protocol: 'acp', command: process.execPath, args: [bundle] } }));
      const env = { PATH: '', [CATALOGUE_ENV]: file };
      expect(() => resolveAgent('mine', env)).toThrow(/agent "mine" is out of date: .*agent\.bundle\.js is older than .*agent\.js \(run `npm run build`\)/);
      at(bundle, 3_000);
      expect(resolveAgent('mine', env).args).toEqual([bundle]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('settings_from in a catalogue entry (docs/agents.md, "Settings")', () => {
  const write = (entry: unknown): { dir: string; env: NodeJS.ProcessEnv } => {
    const dir = mkdtempSync(join(tmpdir(), 'kandev-catalogue-'));
    writeFileSync(join(dir, 'catalogue.json'), JSON.stringify({ agent: { protocol: 'acp', command: '/bin/true', ...(entry as object) } }));
    return { dir, env: { PATH: '', [CATALOGUE_ENV]: join(dir, 'catalogue.json') } };
  };

  it('keeps a directory or a list of files; a ./ source is relative to the catalogue file, like a command', () => {
    const one = write({ settings_from: { source: './codex', home_path: '.codex' } });
    const list = write({ settings_from: { source: ['/etc/kandev/claude/settings.json', './CLAUDE.md'], home_path: '.claude' } });
    try {
      expect(loadCatalogue(one.env).get('agent')!.settings_from).toEqual({ source: join(one.dir, 'codex'), home_path: '.codex' });
      expect(loadCatalogue(list.env).get('agent')!.settings_from).toEqual({
        source: ['/etc/kandev/claude/settings.json', join(list.dir, 'CLAUDE.md')],
        home_path: '.claude',
      });
    } finally {
      rmSync(one.dir, { recursive: true, force: true });
      rmSync(list.dir, { recursive: true, force: true });
    }
  });

  it('refuses a home_path outside HOME, a relative source without ./, and unknown keys', () => {
    for (const [settings_from, words] of [
      [{ source: '/etc/x', home_path: '../x' }, 'home_path must stay inside'],
      [{ source: '/etc/x', home_path: '/root/.codex' }, 'home_path must be relative'],
      [{ source: 'etc/x', home_path: '.x' }, 'settings_from source etc/x must be absolute or start with ./'],
      [{ source: '/etc/x', home_path: '.x', mode: '0644' }, 'Unrecognized key'],
    ] as const) {
      const c = write({ settings_from });
      try {
        expect(() => loadCatalogue(c.env)).toThrow(words);
      } finally {
        rmSync(c.dir, { recursive: true, force: true });
      }
    }
  });
});
