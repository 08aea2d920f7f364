import { execFileSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEPLOY, render } from './render.js';
// @ts-expect-error -- a plain .mjs script, run by operators with node; its exports are tested here
import { imagesOf, parseImage } from '../pin-images.mjs';

/*
 * The documented pinning step (docs/operations.md, "Pinning images by digest"), run on a copy of
 * deploy/: every image of the prod overlay, kandev's and third parties', ends up rendered by digest,
 * and a run that cannot pin them all writes nothing.
 */

const SCRIPT = join(DEPLOY, 'pin-images.mjs');
const copy = mkdtempSync(join(tmpdir(), 'kandev-pin-'));
cpSync(DEPLOY, copy, { recursive: true, filter: (src) => !src.includes('node_modules') });
const prod = join(copy, 'overlays', 'prod');
const kustomization = join(prod, 'kustomization.yaml');
afterAll(() => rmSync(copy, { recursive: true, force: true }));

const digestOf = (i: number) => `sha256:${i.toString(16).padStart(64, '0')}`;
const run = (...args: string[]) => {
  try {
    return { code: 0, out: execFileSync(process.execPath, [SCRIPT, '--overlay', prod, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }) };
  } catch (e) {
    const err = e as { status: number; stderr: string };
    return { code: err.status, out: err.stderr };
  }
};

describe('deploy/pin-images.mjs', () => {
  const images: string[] = imagesOf(render(prod));
  const names: string[] = images.map((ref) => parseImage(ref).name);

  it('reads image references as kustomize writes them', () => {
    expect(parseImage('nats:2.12.15-alpine')).toEqual({ name: 'nats', tag: '2.12.15-alpine', digest: undefined });
    expect(parseImage('registry:5000/kandev/control-plane')).toEqual({ name: 'registry:5000/kandev/control-plane', tag: undefined, digest: undefined });
    expect(parseImage(`a/b:1@${digestOf(1)}`)).toEqual({ name: 'a/b', tag: '1', digest: digestOf(1) });
    // The committed prod overlay runs kandev's two images and NATS, by tag.
    expect(names).toEqual(expect.arrayContaining(['kandev/control-plane', 'kandev/control-plane-agents', 'nats']));
  });

  it('refuses a run that cannot pin every image, and a digest that is not sha256, writing nothing', () => {
    const before = readFileSync(kustomization, 'utf8');
    const some = run(`${names[0]}=${digestOf(1)}`);
    expect(some.code).toBe(1);
    expect(some.out).toContain(`no digest for ${images.filter((r) => parseImage(r).name !== names[0]).join(', ')}`);
    const bad = run(...names.map((n) => `${n}=sha256:abc`));
    expect(bad.code).toBe(1);
    expect(bad.out).toContain('is not a sha256 digest');
    const stranger = run(...names.map((n, i) => `${n}=${digestOf(i + 1)}`), `nginx=${digestOf(99)}`);
    expect(stranger.out).toContain('no image of');
    expect(readFileSync(kustomization, 'utf8')).toBe(before);
  });

  it('pins every image of the overlay by digest, keeping its tag; the overlay still renders and validates its references', () => {
    const ok = run(...names.map((n, i) => `${n}=${digestOf(i + 1)}`));
    expect(ok.code, ok.out).toBe(0);
    const after: string[] = imagesOf(render(prod));
    expect(after).toHaveLength(images.length);
    for (const ref of after) {
      const { name, tag, digest } = parseImage(ref);
      expect(digest, ref).toBe(digestOf(names.indexOf(name) + 1));
      // The tag stays readable beside the digest: the version an operator recognises.
      expect(tag, ref).toBe(parseImage(images.find((r) => parseImage(r).name === name)!).tag);
    }
    // The comments of the kustomization survive the rewrite.
    expect(readFileSync(kustomization, 'utf8')).toContain('# Production: the base');
    // A second run with the rendered digests alone (nothing given) is a no-op that succeeds.
    expect(run().code).toBe(0);
  });
});
