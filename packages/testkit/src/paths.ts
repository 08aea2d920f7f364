import { freshBundle, serviceBundle } from '@kandev/runtime/bundle';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

/** Repository root, from this package's compiled location (packages/testkit/dist). */
export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** Each service that owns a schema, with its migrations (docs/architecture.md, "Data"). */
export const SERVICE_SCHEMAS: ReadonlyArray<{ schema: string; migrationsDir: string }> = [
  { schema: 'orchestrator', migrationsDir: join(repoRoot, 'services/orchestrator/migrations') },
  { schema: 'holds', migrationsDir: join(repoRoot, 'services/holds/migrations') },
];

/**
 * What a stack runs of a service: its bundle, as `npm start` and the image do (ADR 0052), refused when
 * stale; from the repository, or from `root` laid out as the image's /app (scripts/image-layout.mjs).
 */
export const serviceEntry = (name: string, root: string = repoRoot) => freshBundle(serviceBundle(root, name));
