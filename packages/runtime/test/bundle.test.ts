import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bundleInputsFile, freshBundle, staleBundle } from '../src/bundle.js';

describe('a bundle and the modules it was made from (ADR 0052)', () => {
  const root = mkdtempSync(join(tmpdir(), 'bundle-'));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  const dist = join(root, 'svc', 'dist');
  const lib = join(root, 'lib', 'dist');
  mkdirSync(join(dist, 'flows'), { recursive: true });
  mkdirSync(lib, { recursive: true });
  const bundle = join(dist, 'svc.bundle.js');
  const at = (path: string, seconds: number) => {
    writeFileSync(path, '');
    utimesSync(path, seconds, seconds);
  };
  // As scripts/bundle.mjs records them: relative to the bundle's directory, another package's too.
  const recordInputs = () => writeFileSync(bundleInputsFile(bundle), JSON.stringify({ inputs: ['main.js', 'flows/stop.js', '../../lib/dist/index.js'] }));

  it('may run when it is at least as new as every input, whatever else the directories hold', () => {
    at(join(dist, 'main.js'), 1_000);
    at(join(dist, 'flows', 'stop.js'), 1_500);
    at(join(lib, 'index.js'), 2_000);
    at(join(dist, 'unrelated.js'), 9_000); // not an input: a module the bundle does not contain
    at(bundle, 2_000);
    recordInputs();
    expect(staleBundle(bundle)).toBeUndefined();
    expect(freshBundle(bundle)).toBe(bundle);
  });

  it('is refused when an input of its own package or of another is newer, with what to run', () => {
    at(join(dist, 'flows', 'stop.js'), 3_000); // `tsc -b` rewrote one module
    expect(staleBundle(bundle)).toBe(`${bundle} is older than ${join(dist, 'flows', 'stop.js')}`);
    expect(() => freshBundle(bundle)).toThrow(/is older than .*stop\.js: run `npm run build`/);
    at(join(dist, 'flows', 'stop.js'), 1_500);
    at(join(lib, 'index.js'), 2_500); // a library it bundles
    expect(staleBundle(bundle)).toMatch(/older than .*lib\/dist\/index\.js$/);
  });

  it('is refused when an input is gone, its list is missing or the bundle is', () => {
    at(join(lib, 'index.js'), 1_000);
    expect(staleBundle(bundle)).toBeUndefined();
    rmSync(join(dist, 'flows', 'stop.js'));
    expect(staleBundle(bundle)).toMatch(/was made from .*stop\.js, which is gone$/);
    rmSync(bundleInputsFile(bundle));
    expect(staleBundle(bundle)).toMatch(/no readable list of its inputs/);
    rmSync(bundle);
    expect(() => freshBundle(bundle)).toThrow(/is missing: run `npm run build`/);
  });
});
