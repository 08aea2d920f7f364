// Checked, idempotent patches of installed dependencies (the root postinstall runs them; see
// docs/decisions/0013-postgres-driver-patch.md and 0016-nats-request-patch.md for why each exists).
//
// A hunk is { why, find, add } (append `add` after `find`) or { why, find, replace }. Every hunk
// must match exactly once, or the install fails: a new version of a dependency is checked again by
// hand, not patched blindly. A file that carries the mark already must carry every hunk as this
// patches it; running a patch twice is a no-op.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const MARK = 'kandev-patch';

/** node_modules/<name> at the repository's root (the workspaces pin one version, so npm installs one copy there). */
const installed = (name) => join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'node_modules', name);

/**
 * The package's directory, or null when it is not installed (nothing to patch). Fails the install
 * when another version than `version` is there.
 */
export function packageToPatch(tool, name, version, doc) {
  const root = installed(name);
  if (!existsSync(join(root, 'package.json'))) {
    console.log(`[${tool}] ${name} is not installed; nothing to patch`);
    return null;
  }
  const found = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  if (found !== version) fail(tool, doc, `${name} ${found} is installed; this patch is for ${version}`);
  return root;
}

export function patchFile(tool, doc, file, hunks) {
  const before = readFileSync(file, 'utf8');
  if (before.includes(MARK)) {
    const missing = hunks.filter((h) => !before.includes(h.replace ?? h.find + h.add));
    if (missing.length) fail(tool, doc, `${file} is patched, but not as this script patches it (${missing.map((h) => h.why).join('; ')})`);
    return 'already patched';
  }
  let text = before;
  for (const h of hunks) {
    const count = text.split(h.find).length - 1;
    if (count !== 1) fail(tool, doc, `${file}: expected exactly one match for the hunk "${h.why}", found ${count}`);
    text = text.replace(h.find, () => h.replace ?? h.find + h.add);
  }
  writeFileSync(file, text);
  return `patched (${hunks.length} hunk${hunks.length > 1 ? 's' : ''})`;
}

function fail(tool, doc, message) {
  console.error(`[${tool}] ${message}. Check the source against ${doc} before changing this script.`);
  process.exit(1);
}
