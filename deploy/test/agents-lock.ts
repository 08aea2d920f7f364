// The lockfile of the image's agents (deploy/docker/agents/package.json), derived from
// agents-e2e/package-lock.json (the agents are not in the repository's own lockfile): the pinned
// packages and everything they need, at the exact versions, paths and integrity hashes agents-e2e
// was tested with. Nothing is resolved anew, so the
// image runs what the tests ran. A subset of a valid tree at unchanged paths is a valid tree: npm ci
// installs it as is. agents-image.test.ts fails when the committed file differs from this;
// `UPDATE_AGENTS_LOCK=1 npx vitest run test/agents-image.test.ts` (in deploy/) rewrites it.

interface LockEntry {
  version?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  peerDependenciesMeta?: Record<string, { optional?: boolean }>;
  bin?: Record<string, string> | string;
  dev?: boolean;
  devOptional?: boolean;
  [k: string]: unknown;
}
export interface Lockfile {
  name?: string;
  version?: string;
  lockfileVersion: number;
  requires?: boolean;
  packages: Record<string, LockEntry>;
}
export interface AgentsManifest {
  name: string;
  version: string;
  dependencies: Record<string, string>;
}

/** Where Node finds `dep` required from the package installed at `from` (a lockfile key), or undefined. */
function resolveFrom(packages: Lockfile['packages'], from: string, dep: string): string | undefined {
  let base = from;
  for (;;) {
    const key = `${base ? `${base}/` : ''}node_modules/${dep}`;
    if (packages[key]) return key;
    if (!base) return undefined;
    const i = base.lastIndexOf('/node_modules/');
    base = i < 0 ? '' : base.slice(0, i);
  }
}

export function deriveAgentsLock(testedLock: Lockfile, manifest: AgentsManifest): Lockfile {
  const { packages } = testedLock;
  const keep = new Set<string>();
  const visit = (key: string) => {
    if (keep.has(key)) return;
    keep.add(key);
    const p = packages[key]!;
    const deps: Array<[string, boolean]> = [
      ...Object.keys(p.dependencies ?? {}).map((d): [string, boolean] => [d, true]),
      ...Object.keys(p.optionalDependencies ?? {}).map((d): [string, boolean] => [d, false]),
      ...Object.keys(p.peerDependencies ?? {}).map((d): [string, boolean] => [d, !p.peerDependenciesMeta?.[d]?.optional]),
    ];
    for (const [dep, required] of deps) {
      const at = resolveFrom(packages, key, dep);
      if (at) visit(at);
      else if (required) throw new Error(`${key} needs ${dep}, which agents-e2e's lockfile does not hold`);
    }
  };
  for (const [name, version] of Object.entries(manifest.dependencies)) {
    const p = packages[`node_modules/${name}`];
    if (!p) throw new Error(`${name} is not in agents-e2e's lockfile (agents-e2e pins the agents)`);
    if (p.version !== version) throw new Error(`${name}: deploy/docker/agents pins ${version}, agents-e2e's lockfile has ${p.version}`);
    visit(`node_modules/${name}`);
  }
  const out: Lockfile = {
    name: manifest.name,
    version: manifest.version,
    lockfileVersion: 3,
    requires: true,
    packages: { '': { name: manifest.name, version: manifest.version, dependencies: manifest.dependencies } },
  };
  for (const key of [...keep].sort()) {
    // Production dependencies of this package, whatever they were in agents-e2e.
    const entry = { ...packages[key]! };
    delete entry.dev;
    delete entry.devOptional;
    out.packages[key] = entry;
  }
  return out;
}

export const renderLock = (lock: Lockfile): string => `${JSON.stringify(lock, null, 2)}\n`;
