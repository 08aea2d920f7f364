/**
 * The two token keys (SPEC R-9.3, ADR 0020). Operator tokens are signed with the operator key,
 * agent tokens with the agent key, and each service holds only the key it uses:
 *
 * | service      | key      | use                                   |
 * |--------------|----------|---------------------------------------|
 * | gateway      | operator | verifies operator tokens              |
 * | mcp          | agent    | verifies agent tokens                 |
 * | orchestrator | agent    | verifies the agent token mcp forwards |
 * | lifecycle    | agent    | mints one agent token per execution   |
 *
 * `KANDEV_JWT_SECRET` (INTERFACES.md) is still accepted as both keys, so an existing set-up keeps
 * working; a key of its own (`KANDEV_OPERATOR_JWT_SECRET`, `KANDEV_AGENT_JWT_SECRET`) wins over it.
 *
 * This module has no dependencies beyond node, so `npm start` and `npm run token`
 * (`@kandev/runtime/keys`) apply the very same rules as the services.
 */

export type KeyKind = 'operator' | 'agent';

/**
 * Which service holds which key: the table above, as data. Service definitions name their entry
 * (ServiceDefinition.keys) and `npm start` hands each process only these.
 */
export const SERVICE_KEYS = {
  gateway: ['operator'],
  mcp: ['agent'],
  orchestrator: ['agent'],
  lifecycle: ['agent'],
  holds: [],
} as const satisfies Record<string, readonly KeyKind[]>;

export const KEY_ENV: Readonly<Record<KeyKind, string>> = {
  operator: 'KANDEV_OPERATOR_JWT_SECRET',
  agent: 'KANDEV_AGENT_JWT_SECRET',
};
/** The shared key of INTERFACES.md: both keys when the key's own variable is unset. */
export const SHARED_KEY_ENV = 'KANDEV_JWT_SECRET';

/** Outside production (INTERFACES.md pins 16 characters). */
export const MIN_KEY_CHARS = 16;
/** With `NODE_ENV=production`: 32 bytes (UTF-8), the HS256 key size RFC 7518 §3.2 asks for. */
export const MIN_PRODUCTION_KEY_BYTES = 32;

/**
 * Example values shipped in this repository. Anyone can read them, so a service holding one would
 * accept tokens anyone can mint: refused everywhere, whatever NODE_ENV says.
 */
export const PLACEHOLDER_KEYS: readonly string[] = [
  'change-me-at-least-32-random-bytes',
  'change-me-operator-key-at-least-32-random-bytes',
  'change-me-agent-key-at-least-32-random-bytes',
];
/** The dev overlay's committed keys (deploy/overlays/dev): fine on a laptop, refused with NODE_ENV=production. */
export const DEV_ONLY_KEYS: readonly string[] = [
  'dev-only-jwt-secret-not-for-production',
  'dev-only-operator-jwt-key-not-for-production',
  'dev-only-agent-jwt-key-not-for-production',
];

export interface ResolvedKey {
  key: string;
  /** The variable it came from (never the value: messages name this). */
  source: string;
}

/** Which variable holds the key, and its value; null when neither it nor the shared one is set. */
export function keyFromEnv(env: Record<string, string | undefined>, kind: KeyKind): ResolvedKey | null {
  const own = env[KEY_ENV[kind]];
  if (own) return { key: own, source: KEY_ENV[kind] };
  const shared = env[SHARED_KEY_ENV];
  if (shared) return { key: shared, source: SHARED_KEY_ENV };
  return null;
}

/** Why this key value must not be used, or null. Never includes the value. */
export function keyProblem(key: string, production: boolean): string | null {
  if (PLACEHOLDER_KEYS.includes(key)) return 'is a placeholder from the repository (deploy/); generate one, e.g. `openssl rand -base64 48`';
  if (production && DEV_ONLY_KEYS.includes(key)) return 'is the dev overlay key, refused with NODE_ENV=production';
  if (key.length < MIN_KEY_CHARS) return `must be at least ${MIN_KEY_CHARS} characters`;
  if (production && Buffer.byteLength(key, 'utf8') < MIN_PRODUCTION_KEY_BYTES)
    return `must be at least ${MIN_PRODUCTION_KEY_BYTES} bytes with NODE_ENV=production`;
  return null;
}

export const isProduction = (env: Record<string, string | undefined>) => env.NODE_ENV === 'production';

/**
 * The keys a service needs, checked; throws one error listing every problem (the values never
 * appear). A service calls this before it connects anything: it refuses to start without its key.
 */
export function resolveKeys(env: Record<string, string | undefined>, kinds: readonly KeyKind[]): Partial<Record<KeyKind, string>> {
  const production = isProduction(env);
  const out: Partial<Record<KeyKind, string>> = {};
  const problems: string[] = [];
  for (const kind of kinds) {
    const found = keyFromEnv(env, kind);
    if (!found) {
      problems.push(
        `${KEY_ENV[kind]} (or ${SHARED_KEY_ENV}): is required (at least ${production ? `${MIN_PRODUCTION_KEY_BYTES} bytes` : `${MIN_KEY_CHARS} characters`}); services refuse to start without it`,
      );
      continue;
    }
    const problem = keyProblem(found.key, production);
    if (problem) problems.push(`${found.source}: ${problem} (value hidden)`);
    else out[kind] = found.key;
  }
  // One variable, reported once, even when it stands for both keys.
  if (problems.length) throw new Error(`invalid environment:\n  ${[...new Set(problems)].join('\n  ')}`);
  return out;
}

/** Removes every token key variable from an environment (runService: before any child can be spawned). */
export function withholdKeys(env: Record<string, string | undefined>): void {
  for (const v of [SHARED_KEY_ENV, ...Object.values(KEY_ENV)]) delete env[v];
}
