import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultAgentctlBin, freshBundle } from '../src/agentctl/process.js';

describe("agentctl's bundle (ADR 0051)", () => {
  const dist = mkdtempSync(join(tmpdir(), 'agentctl-bundle-'));
  afterAll(() => rmSync(dist, { recursive: true, force: true }));
  mkdirSync(join(dist, 'adapters'));
  mkdirSync(join(dist, 'agentctl-chunks'));
  const bundle = join(dist, 'agentctl.bundle.js');
  const at = (path: string, seconds: number) => {
    writeFileSync(path, '');
    utimesSync(path, seconds, seconds);
  };

  it('is what the lifecycle spawns when it is at least as new as every module tsc wrote', () => {
    at(join(dist, 'main.js'), 1_000);
    at(join(dist, 'adapters', 'acp.js'), 1_500);
    at(join(dist, 'main.d.ts'), 9_000); // not a module
    at(join(dist, 'agentctl-chunks', 'acp-x.js'), 9_000); // the bundle's own chunk
    at(bundle, 2_000);
    expect(freshBundle(bundle, dist)).toBe(bundle);
    at(bundle, 1_500);
    expect(freshBundle(bundle, dist)).toBe(bundle);
  });

  it('is refused when older than any module of the build (tsc -b rewrites only what changed) or missing, with what to run', () => {
    at(join(dist, 'adapters', 'acp.js'), 3_000);
    at(bundle, 2_000);
    expect(() => freshBundle(bundle, dist)).toThrow(/older than its build: run `npm run build`/);
    rmSync(bundle);
    expect(() => freshBundle(bundle, dist)).toThrow(/missing/);
  });

  it("is this checkout's bundle by default", () => {
    expect(defaultAgentctlBin()).toMatch(/packages\/agentctl\/dist\/agentctl\.bundle\.js$/);
  });
});
