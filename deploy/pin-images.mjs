#!/usr/bin/env node
/*
 * Pins every image of an overlay by digest (docs/operations.md, "Pinning images by digest"): a tag
 * can be moved to other content, a digest cannot, so what was tested is what runs.
 *
 *   node deploy/pin-images.mjs [--overlay deploy/overlays/prod] [--resolve] [<image>=sha256:<64 hex> ...]
 *
 * It renders the overlay, lists every image its pods run (kandev's and third parties', e.g. nats),
 * and writes a `digest:` for each into the overlay's `images:` block (keeping or adding `newTag`, so
 * the rendered reference reads `name:tag@sha256:…`). Digests come from the arguments (what the
 * release pipeline's push printed) or, with --resolve, from the registry through `skopeo inspect`
 * (or `crane digest`) of the rendered `name:tag`. All or nothing: an image without a digest, or a
 * digest that is not sha256, refuses the whole run and writes nothing; after writing, the overlay
 * is rendered again and every image must carry its digest, else the file is put back.
 * Committed overlays keep tags (no image has been pushed from this repository); the release runs
 * this, then renders and applies.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments, parseDocument } from 'yaml';

const DIGEST = /^sha256:[0-9a-f]{64}$/;
const POD_KINDS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'Job', 'ReplicaSet']);

/** `name[:tag][@digest]` → its parts (a registry port, `host:5000/x`, is not a tag). */
export function parseImage(ref) {
  const [rest, digest] = ref.split('@');
  const slash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > slash) return { name: rest.slice(0, colon), tag: rest.slice(colon + 1), digest };
  return { name: rest, tag: undefined, digest };
}

/** Every image reference the rendered objects' pods run (containers and init containers). */
export function imagesOf(objects) {
  const refs = new Set();
  for (const o of objects) {
    const pod =
      o?.kind === 'CronJob'
        ? o.spec?.jobTemplate?.spec?.template?.spec
        : POD_KINDS.has(o?.kind)
          ? o.spec?.template?.spec
          : o?.kind === 'Pod'
            ? o.spec
            : undefined;
    for (const c of [...(pod?.initContainers ?? []), ...(pod?.containers ?? [])]) refs.add(c.image);
  }
  return [...refs].sort();
}

function render(overlay) {
  const out = execFileSync('kubectl', ['kustomize', overlay], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return parseAllDocuments(out).map((d) => d.toJS());
}

function resolveDigest(ref) {
  for (const [cmd, args] of [
    ['skopeo', ['inspect', '--format', '{{.Digest}}', `docker://${ref}`]],
    ['crane', ['digest', ref]],
  ]) {
    try {
      return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
    } catch (e) {
      if (e.code === 'ENOENT') continue; // not installed: try the next tool
      throw new Error(`${cmd} could not resolve ${ref}: ${String(e.stderr ?? e.message).trim()}`);
    }
  }
  throw new Error(`--resolve needs skopeo or crane on PATH (to resolve ${ref})`);
}

export function pin({ overlay, given, resolveMissing }) {
  const file = join(overlay, 'kustomization.yaml');
  const refs = imagesOf(render(overlay));
  const digests = new Map();
  const missing = [];
  for (const ref of refs) {
    const { name, tag, digest } = parseImage(ref);
    const d = given.get(name) ?? digest ?? (resolveMissing ? resolveDigest(ref) : undefined);
    if (!d) missing.push(ref);
    else if (!DIGEST.test(d)) throw new Error(`${name}: "${d}" is not a sha256 digest (sha256:<64 hex>)`);
    else digests.set(name, { digest: d, tag });
  }
  const unknown = [...given.keys()].filter((n) => !digests.has(n));
  if (unknown.length > 0) throw new Error(`no image of ${overlay} is named ${unknown.join(', ')} (it runs: ${refs.join(', ')})`);
  if (missing.length > 0) throw new Error(`no digest for ${missing.join(', ')}: give <image>=sha256:… or --resolve; nothing was written`);

  const before = readFileSync(file, 'utf8');
  const doc = parseDocument(before);
  if (!doc.has('images')) doc.set('images', doc.createNode([]));
  const images = doc.get('images');
  for (const [name, { digest, tag }] of digests) {
    let entry = images.items.find((i) => i.get('name') === name);
    if (!entry) {
      entry = doc.createNode({ name });
      images.add(entry);
    }
    if (tag && !entry.has('newTag') && !entry.has('newName')) entry.set('newTag', tag);
    entry.set('digest', digest);
  }
  writeFileSync(file, doc.toString());
  const unpinned = imagesOf(render(overlay)).filter((ref) => !DIGEST.test(parseImage(ref).digest ?? ''));
  if (unpinned.length > 0) {
    writeFileSync(file, before);
    throw new Error(`still not pinned after writing ${file}: ${unpinned.join(', ')}; the file is as it was`);
  }
  return [...digests].map(([name, { digest }]) => `${name}@${digest}`);
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  let overlay = join(dirname(fileURLToPath(import.meta.url)), 'overlays', 'prod');
  let resolveMissing = false;
  const given = new Map();
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--overlay') overlay = resolve(args[++i]);
    else if (a === '--resolve') resolveMissing = true;
    else if (a.includes('=')) given.set(a.slice(0, a.lastIndexOf('=')), a.slice(a.lastIndexOf('=') + 1));
    else {
      console.error(`usage: node deploy/pin-images.mjs [--overlay <dir>] [--resolve] [<image>=sha256:<64 hex> ...] (got "${a}")`);
      process.exit(2);
    }
  }
  try {
    for (const line of pin({ overlay, given, resolveMissing })) console.log(`pinned ${line}`);
  } catch (e) {
    console.error(`pin-images: ${e.message}`);
    process.exit(1);
  }
}
