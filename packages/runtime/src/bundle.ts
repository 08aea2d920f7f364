import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';

/*
 * The programs the system starts (the five services, agentctl, the scripted test agents) run from
 * one bundled file each, made from tsc's output by `scripts/bundle.mjs` (ADR 0052). Beside each
 * bundle the script writes `<bundle>.inputs.json`: the repository's modules it was made from. A
 * bundle older than any of them runs the code of an earlier build (`tsc -b` alone, or a test
 * runner's watch, rewrites only the modules that changed), so whoever starts one checks it first.
 * Kept free of other imports: agentctl loads it on every launch.
 */

/** Where a service's bundle is in a checkout: what `npm start`, the test stacks and the image run. */
export const serviceBundle = (repoRoot: string, service: string): string => join(repoRoot, 'services', service, 'dist', `${service}.bundle.js`);

/** The sidecar that lists a bundle's inputs (paths relative to the bundle's directory). */
export const bundleInputsFile = (bundle: string): string => `${bundle}.inputs.json`;

/** Why `bundle` must not be run (missing, or older than one of its inputs), or undefined if it may. */
export function staleBundle(bundle: string): string | undefined {
  if (!existsSync(bundle)) return `${bundle} is missing`;
  let inputs: string[];
  try {
    inputs = (JSON.parse(readFileSync(bundleInputsFile(bundle), 'utf8')) as { inputs: string[] }).inputs;
  } catch {
    return `${bundle} has no readable list of its inputs (${bundleInputsFile(bundle)})`;
  }
  const bundled = statSync(bundle).mtimeMs;
  for (const input of inputs) {
    const path = resolve(dirname(bundle), input);
    if (!existsSync(path)) return `${bundle} was made from ${path}, which is gone`;
    if (statSync(path).mtimeMs > bundled) return `${bundle} is older than ${path}`;
  }
  return undefined;
}

/** `bundle`, or an error that says what to run: `npm run build` makes every bundle again. */
export function freshBundle(bundle: string): string {
  const why = staleBundle(bundle);
  if (why) throw new Error(`${why}: run \`npm run build\``);
  return bundle;
}
