#!/usr/bin/env node
// `npm run token -- operator [--workspace ID]...`
// `npm run token -- agent --task ID [--session ID] [--mode task|config|office|external]`
// Prints only the token on stdout. Operator tokens are signed with the operator key, agent tokens
// with the agent key (ADR 0020): KANDEV_OPERATOR_JWT_SECRET / KANDEV_AGENT_JWT_SECRET, else
// KANDEV_JWT_SECRET, else the key npm start stored in ${KANDEV_STATE_DIR:-.kandev} (secret / agent-secret).
import { KEY_VARS, keyFile, readKey, stateDir } from './lib/state.mjs';

const USAGE = `usage:
  npm run token -- operator [--workspace <id>]... [--sub <name>] [--ttl 12h]
  npm run token -- agent --task <task-id> [--session <session-id>] [--mode task|config|office|external] [--ttl 24h]

Without --workspace the operator token covers all workspaces.
Operator tokens are signed with the operator key: KANDEV_OPERATOR_JWT_SECRET, else KANDEV_JWT_SECRET,
else the one npm start stored in \${KANDEV_STATE_DIR:-.kandev}/secret. Agent tokens with the agent key:
KANDEV_AGENT_JWT_SECRET, else KANDEV_JWT_SECRET, else \${KANDEV_STATE_DIR:-.kandev}/agent-secret.
An agent token made here names no execution: it is valid until it expires (--ttl), not only while
some execution lives (docs/security.md).`;

/** @type {readonly string[]} */
const MODES = ['task', 'config', 'office', 'external'];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * @param {string} message
 * @returns {never}
 */
function fail(message) {
  process.stderr.write(`token: ${message}\n\n${USAGE}\n`);
  process.exit(2);
}

/**
 * `--name value` and `--name=value`; repeatable flags collect into arrays.
 * @param {string[]} args
 * @param {string[]} allowed
 * @returns {Record<string, string[] | undefined>}
 */
function parseFlags(args, allowed) {
  /** @type {Record<string, string[] | undefined>} */
  const flags = {};
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] ?? '';
    if (arg === '-h' || arg === '--help') {
      process.stdout.write(USAGE + '\n');
      process.exit(0);
    }
    const m = /^--([a-z]+)(?:=(.*))?$/.exec(arg);
    const name = m?.[1];
    if (!m || !name || !allowed.includes(name)) fail(`unexpected argument ${arg}`);
    const value = m[2] ?? args[++i];
    if (value === undefined || value.startsWith('--')) fail(`--${name} needs a value`);
    (flags[name] ??= []).push(value);
  }
  return flags;
}

/**
 * @param {Record<string, string[] | undefined>} flags
 * @param {string} name
 */
const one = (flags, name) => {
  const v = flags[name];
  if (v && v.length > 1) fail(`--${name} given more than once`);
  return v?.[0];
};

const [kind, ...rest] = process.argv.slice(2);
if (!kind || kind === '-h' || kind === '--help') {
  process.stdout.write(USAGE + '\n');
  process.exit(kind ? 0 : 2);
}
if (kind !== 'operator' && kind !== 'agent') fail(`unknown token kind "${kind}" (operator or agent)`);

const found = readKey(kind);
if (!found) {
  process.stderr.write(
    `token: no ${kind} key. Set ${KEY_VARS[kind]} (or KANDEV_JWT_SECRET), or run \`npm start\` once so it stores one in ${keyFile(stateDir(), kind)} (same KANDEV_STATE_DIR).\n`,
  );
  process.exit(1);
}

let jwt;
try {
  jwt = await import('@kandev/runtime/jwt');
} catch (e) {
  process.stderr.write(`token: cannot load @kandev/runtime (${/** @type {Error} */ (e).message}). Build first: npm run build\n`);
  process.exit(1);
}

// The services' own rules (placeholders, length; 32 bytes with NODE_ENV=production): a token
// signed with a key no service would start with is useless, and a placeholder key is public.
const { keyProblem, isProduction } = await import('@kandev/runtime/keys');
const problem = keyProblem(found.secret, isProduction(process.env));
if (problem) {
  process.stderr.write(`token: the ${kind} key (${found.source}) ${problem}\n`);
  process.exit(1);
}

let token;
if (kind === 'operator') {
  const flags = parseFlags(rest, ['workspace', 'sub', 'ttl']);
  const workspaces = flags.workspace ?? ['*'];
  try {
    token = await jwt.signOperatorToken(found.secret, { sub: one(flags, 'sub') ?? 'local-operator', workspaces }, one(flags, 'ttl') ?? '12h');
  } catch (e) {
    fail(/** @type {Error} */ (e).message);
  }
} else {
  const flags = parseFlags(rest, ['task', 'session', 'mode', 'ttl']);
  const task = one(flags, 'task');
  const session = one(flags, 'session');
  const mode = one(flags, 'mode') ?? 'task';
  if (!task) fail('agent tokens need --task <task-id>');
  if (!UUID.test(task)) fail(`--task must be a UUID, got "${task}"`);
  if (session !== undefined && !UUID.test(session)) fail(`--session must be a UUID, got "${session}"`);
  if (!MODES.includes(mode)) fail(`--mode must be one of ${MODES.join(', ')}`);
  try {
    token = await jwt.signAgentToken(
      found.secret,
      { task_id: task, ...(session ? { session_id: session } : {}), mode: /** @type {'task' | 'config' | 'office' | 'external'} */ (mode) },
      one(flags, 'ttl') ?? '24h',
    );
  } catch (e) {
    // The claims schema may be stricter than the flag checks; jose rejects a bad --ttl.
    const err = /** @type {Error & { issues?: Array<{ path: PropertyKey[], message: string }> }} */ (e);
    fail(`invalid agent claims: ${err.issues?.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ') ?? err.message}`);
  }
}
process.stdout.write(token + '\n');
