import { execFileSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';

/** deploy/, where the kustomizations are. */
export const DEPLOY = join(dirname(fileURLToPath(import.meta.url)), '..');

export type K8sObject = { apiVersion: string; kind: string; metadata: { name: string; labels?: Record<string, string> }; [k: string]: any };

/** The objects `kubectl kustomize deploy/<overlay>` renders. */
export function render(overlay: string): K8sObject[] {
  let out: string;
  try {
    out = execFileSync('kubectl', ['kustomize', resolve(DEPLOY, overlay)], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  } catch (e) {
    throw new Error(`kubectl kustomize ${overlay} failed (kubectl with kustomize must be on PATH): ${(e as Error).message}`);
  }
  return parseAllDocuments(out)
    .map((d) => d.toJS() as K8sObject)
    .filter(Boolean);
}
