import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { defaultAgentctlBin, freshBundle } from '../src/agentctl/process.js';

describe("agentctl's bundle (ADR 0051)", () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentctl-bundle-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const main = join(dir, 'main.js');
  const bundle = join(dir, 'agentctl.bundle.js');
  const at = (path: string, seconds: number) => {
    writeFileSync(path, '');
    utimesSync(path, seconds, seconds);
  };

  it('is what the lifecycle spawns when it is at least as new as the build', () => {
    at(main, 1_000);
    at(bundle, 2_000);
    expect(freshBundle(bundle, main)).toBe(bundle);
    at(bundle, 1_000);
    expect(freshBundle(bundle, main)).toBe(bundle);
  });

  it('is refused when older than the build or missing, with what to run', () => {
    at(main, 3_000);
    at(bundle, 2_000);
    expect(() => freshBundle(bundle, main)).toThrow(/older than its build: run `npm run build`/);
    expect(() => freshBundle(join(dir, 'absent.js'), main)).toThrow(/missing/);
  });

  it("is this checkout's bundle by default", () => {
    expect(defaultAgentctlBin()).toMatch(/packages\/agentctl\/dist\/agentctl\.bundle\.js$/);
  });
});
