import { randomBytes } from 'node:crypto';
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';

/**
 * The NATS users of the services, as deploy/nats/permissions.conf names their permission variables.
 * A local server (npm start, the test kit) admits these and nobody else (ADR 0054).
 */
export const NATS_SERVICE_USERS = {
  gateway: 'GATEWAY_PERMISSIONS',
  mcp: 'MCP_PERMISSIONS',
  orchestrator: 'ORCHESTRATOR_PERMISSIONS',
  lifecycle: 'LIFECYCLE_PERMISSIONS',
  holds: 'HOLDS_PERMISSIONS',
} as const;
export type NatsServiceUser = keyof typeof NATS_SERVICE_USERS;

export interface NatsCredentials {
  user: string;
  pass: string;
}

export interface NatsAuthConfig {
  /** The server config to start nats-server with (`-c`): loopback, JetStream, the users. */
  configFile: string;
  /** Each service's user and password, for its NATS_USER / NATS_PASS. */
  users: Record<NatsServiceUser, NatsCredentials>;
  /** The test kit's own user (every subject), when asked for: what tests observe the bus with. */
  observer?: NatsCredentials;
}

/**
 * Writes a nats-server config into `dir` (created 0700; the file 0600) that `include`s the
 * repository's permission file, the single source of the rules, and gives every service a user
 * with a fresh random password. `include` resolves a path relative to the including file (an
 * absolute one is not honoured by nats-server 2.9), so the path written is relative.
 * `observer`: one more user with every right, for a test kit to look at the bus with; never for
 * npm start.
 */
export function writeNatsAuthConfig(opts: { dir: string; permissionsFile: string; observer?: boolean; extra?: string }): NatsAuthConfig {
  mkdirSync(opts.dir, { recursive: true, mode: 0o700 });
  chmodSync(opts.dir, 0o700);
  const configFile = join(opts.dir, 'nats-server.conf');
  const password = () => randomBytes(24).toString('base64url');
  const users = Object.fromEntries(Object.keys(NATS_SERVICE_USERS).map((u) => [u, { user: u, pass: password() }])) as Record<NatsServiceUser, NatsCredentials>;
  const observer = opts.observer ? { user: 'kandev-test-observer', pass: password() } : undefined;
  const lines = Object.entries(NATS_SERVICE_USERS).map(
    ([u, perms]) => `    { user: ${u}, password: "${users[u as NatsServiceUser].pass}", permissions: $${perms} }`,
  );
  if (observer) lines.push(`    { user: ${observer.user}, password: "${observer.pass}" }`);
  const include = relative(dirname(configFile), opts.permissionsFile);
  const text = [
    '# Written by @kandev/runtime/dev/nats-auth (npm start, the test kit): one user per service,',
    '# the permissions of deploy/nats/permissions.conf. Passwords are random for each start.',
    'host: 127.0.0.1',
    'port: -1',
    'jetstream: enabled',
    opts.extra ?? '',
    `include "${include}"`,
    'authorization {',
    '  users = [',
    ...lines,
    '  ]',
    '}',
    '',
  ].join('\n');
  writeFileSync(configFile, text, { mode: 0o600 });
  chmodSync(configFile, 0o600);
  return { configFile, users, ...(observer ? { observer } : {}) };
}
