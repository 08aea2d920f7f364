/**
 * Who sent a request on the bus, verified (ADR 0055). Each service holds an Ed25519 private key of
 * its own and every service's public key. Every request a service sends carries a caller assertion
 * (a compact JWS in the `kandev-caller` header): issuing service (`iss`, also the `kid`), the NATS
 * subject it is for (`aud`), a SHA-256 of the request body (`bh`), an expiry in seconds (`exp`),
 * and, from the gateway, the operator it acts for (`sub`, `workspaces`). A receiver then accepts
 * an operator actor in a payload only when the gateway vouches for exactly that operator, and an
 * endpoint restricted to some callers only from them. NATS permissions say who may publish a
 * subject; this says who sent this message, so a leaked NATS password alone cannot act as an
 * operator or drive lifecycle.
 *
 * Keys are given as base64 DER (PKCS#8 private, SPKI public), one line each, so they fit an env
 * file and a Kubernetes Secret: KANDEV_BUS_KEY (this service's own) and KANDEV_BUS_PUBLIC_KEYS
 * (`<service>=<key>,...`). Keys are imported once.
 *
 * An assertion is a compact JWS (RFC 7515, EdDSA as RFC 8037 names it), signed and verified with
 * node:crypto's one-shot `sign`/`verify` on the event loop (about 50 and 120 µs). WebCrypto (`jose`)
 * runs each as a job on libuv's thread pool, four threads shared with every fs call of the process,
 * and there a verify waited behind a teardown's or a launch's file work: 6 ms at the median and up
 * to 1.4 s while the pool read /proc (docs/fast-paths.md, "Tails"; ADR 0073).
 */
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify, type KeyObject } from 'node:crypto';
import type { NatsConnection } from '@nats-io/nats-core';
import { Headers } from '@kandev/contracts';

export const BUS_KEY_ENV = 'KANDEV_BUS_KEY';
export const BUS_PUBLIC_KEYS_ENV = 'KANDEV_BUS_PUBLIC_KEYS';

/** The services that sign on the bus (their NATS users and keys have the same names). */
export const BUS_SERVICES = ['gateway', 'mcp', 'orchestrator', 'lifecycle', 'holds'] as const;

/** The operator a gateway assertion vouches for. */
export interface VouchedOperator {
  id: string;
  workspaces: readonly string[];
}

/** A verified caller: the service that signed, and the operator it acts for (gateway only). */
export interface Caller {
  service: string;
  operator?: VouchedOperator | undefined;
}

/** Clock difference between hosts tolerated on `exp`. */
const CLOCK_TOLERANCE_S = 5;
/** An assertion lives as long as its request may wait, plus this. */
const ASSERTION_SLACK_S = 5;
const ALG = 'EdDSA';

export class BusIdentityError extends Error {
  constructor(
    message: string,
    /** The caller, when its assertion verified and the rule refused it. */
    readonly caller: Caller | null = null,
  ) {
    super(message);
  }
}

/**
 * The public keys of the dev overlay's committed bus keys (deploy/overlays/dev): anyone can read
 * their private halves, so a service whose own key is one of them refuses to start with
 * NODE_ENV=production.
 */
export const DEV_ONLY_BUS_PUBLIC_KEYS: readonly string[] = [
  'MCowBQYDK2VwAyEA5RgwjFscubTqt5cvTf5QWwI9nUCmsoSmvDP0816DOfk=',
  'MCowBQYDK2VwAyEAXgZUoiL1PODdtUhNgPHB34vNZTAh09tQNALBPW9S8HI=',
  'MCowBQYDK2VwAyEAzKocYW+VShGIp8NUPnIu0Xs1LpD9o12NHXERbJpb1cU=',
  'MCowBQYDK2VwAyEAVg4WKNtbT7vaQYs+FxEkTqFJztngZK+qwBlMClUMmB8=',
  'MCowBQYDK2VwAyEA/H7uLIADZVmn94jiBAECYjzF3mZR7H+/Gw9IdwVunAQ=',
];

/** A key pair for each service, as base64 DER: what npm start and the test kit generate. */
export function generateBusKeys(services: readonly string[] = BUS_SERVICES): { privateKeys: Record<string, string>; publicKeys: string } {
  const privateKeys: Record<string, string> = {};
  const pub: string[] = [];
  for (const s of services) {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    privateKeys[s] = privateKey.export({ format: 'der', type: 'pkcs8' }).toString('base64');
    pub.push(`${s}=${publicKey.export({ format: 'der', type: 'spki' }).toString('base64')}`);
  }
  return { privateKeys, publicKeys: pub.join(',') };
}

function importPrivate(b64: string, what: string): KeyObject {
  try {
    const k = createPrivateKey({ key: Buffer.from(b64.trim(), 'base64'), format: 'der', type: 'pkcs8' });
    if (k.asymmetricKeyType !== 'ed25519') throw new Error(`an ${k.asymmetricKeyType} key`);
    return k;
  } catch (e) {
    throw new BusIdentityError(`${what}: not an Ed25519 private key in base64 PKCS#8 DER (${(e as Error).message}; value hidden)`);
  }
}

/** `<service>=<base64 SPKI>,...` → the public key of each service. */
export function parsePublicKeys(text: string): Map<string, KeyObject> {
  const out = new Map<string, KeyObject>();
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const eq = part.indexOf('=');
    const service = part.slice(0, eq).trim();
    if (eq <= 0 || !service) throw new BusIdentityError(`${BUS_PUBLIC_KEYS_ENV}: "${part.slice(0, 20)}…" is not <service>=<key>`);
    try {
      const k = createPublicKey({ key: Buffer.from(part.slice(eq + 1).trim(), 'base64'), format: 'der', type: 'spki' });
      if (k.asymmetricKeyType !== 'ed25519') throw new Error(`an ${k.asymmetricKeyType} key`);
      out.set(service, k);
    } catch (e) {
      throw new BusIdentityError(`${BUS_PUBLIC_KEYS_ENV}: the key of ${service} is not an Ed25519 public key in base64 SPKI DER (${(e as Error).message})`);
    }
  }
  return out;
}

const bodyHash = (data: Uint8Array) => createHash('sha256').update(data).digest('base64url');
const b64 = (json: string) => Buffer.from(json).toString('base64url');
/** Whether `signature` (base64url) is `key`'s Ed25519 signature of `input`; a malformed one is not. */
function signatureHolds(input: string, signature: string, key: KeyObject): boolean {
  try {
    return verify(null, Buffer.from(input), key, Buffer.from(signature, 'base64url'));
  } catch {
    return false;
  }
}
/** A JWS segment's JSON object, or null. */
function decodeJson(segment: string): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

const sameOperator = (a: VouchedOperator, b: VouchedOperator) =>
  a.id === b.id && a.workspaces.length === b.workspaces.length && [...a.workspaces].sort().join('\n') === [...b.workspaces].sort().join('\n');

/** This service's signing key and every service's verifying key. */
export class BusIdentity {
  private readonly publicKeys: Map<string, KeyObject>;
  private readonly refusalListeners: Array<(r: BusRefusal) => Promise<void> | void> = [];

  constructor(
    readonly service: string,
    private readonly privateKey: KeyObject,
    publicKeys: Map<string, KeyObject>,
  ) {
    const own = publicKeys.get(service);
    if (!own) throw new BusIdentityError(`${BUS_PUBLIC_KEYS_ENV} has no key for ${service} itself`);
    // A private key that does not match the published public key would sign what nobody accepts.
    if (
      !createPublicKey(privateKey)
        .export({ format: 'der', type: 'spki' })
        .equals(own.export({ format: 'der', type: 'spki' }))
    )
      throw new BusIdentityError(`${BUS_KEY_ENV} is not the private key of ${service}'s key in ${BUS_PUBLIC_KEYS_ENV}`);
    this.publicKeys = publicKeys;
  }

  /** The caller assertion of one request: for `subject`, this body, valid `ttlMs` (+ slack). */
  assert(subject: string, data: Uint8Array, ttlMs: number, operator?: VouchedOperator): Promise<string> {
    const now = Math.floor(Date.now() / 1000);
    const claims: Record<string, unknown> = {
      bh: bodyHash(data),
      iss: this.service,
      aud: subject,
      iat: now,
      exp: now + Math.ceil(ttlMs / 1000) + ASSERTION_SLACK_S,
    };
    if (operator) Object.assign(claims, { sub: operator.id, workspaces: [...operator.workspaces] });
    const signingInput = `${b64(JSON.stringify({ alg: ALG, kid: this.service }))}.${b64(JSON.stringify(claims))}`;
    return Promise.resolve(`${signingInput}.${sign(null, Buffer.from(signingInput), this.privateKey).toString('base64url')}`);
  }

  /**
   * The caller of a request that arrived on `subject` with this body, or throws BusIdentityError.
   * `forwarded`: the assertion is the gateway's, passed on by a service acting on its request
   * (its audience and body are the first hop's), so only its signature, issuer and expiry count.
   */
  // Async though nothing in it waits: a refusal is a rejection, as its callers await it.
  async verify(token: string, subject: string, data: Uint8Array, forwarded = false): Promise<Caller> {
    const parts = token.split('.');
    const header = parts.length === 3 ? decodeJson(parts[0]!) : null;
    if (!header) throw new BusIdentityError('the caller assertion is not a JWS');
    const kid = typeof header.kid === 'string' ? header.kid : undefined;
    const key = kid ? this.publicKeys.get(kid) : undefined;
    if (!key) throw new BusIdentityError(`no public key for the caller ${JSON.stringify(kid ?? null)}`);
    const refuse = (why: string) => new BusIdentityError(`the caller assertion of ${kid} does not verify: ${why}`);
    if (header.alg !== ALG) throw refuse(`alg ${JSON.stringify(header.alg)} is not ${ALG}`);
    if (!signatureHolds(`${parts[0]}.${parts[1]}`, parts[2]!, key)) throw refuse('signature verification failed');
    const payload = decodeJson(parts[1]!);
    if (!payload) throw refuse('its claims are not a JSON object');
    if (payload.iss !== kid) throw refuse(`unexpected "iss" claim value ${JSON.stringify(payload.iss)}`);
    if (!forwarded && payload.aud !== subject) throw refuse('unexpected "aud" claim value');
    if (typeof payload.exp !== 'number') throw refuse('missing required "exp" claim');
    if (payload.exp + CLOCK_TOLERANCE_S <= Date.now() / 1000) throw refuse('"exp" claim timestamp check failed');
    if (!forwarded && payload.bh !== bodyHash(data)) throw new BusIdentityError(`the caller assertion of ${kid} is for another request body`);
    const workspaces = payload.workspaces;
    const operator =
      typeof payload.sub === 'string' && Array.isArray(workspaces) && workspaces.every((w) => typeof w === 'string')
        ? { id: payload.sub, workspaces: workspaces as string[] }
        : undefined;
    return { service: kid!, operator };
  }

  /**
   * Called for every request this service refuses for its caller (the orchestrator audits them);
   * the refusal is answered once every listener has settled, so the audit row is there first.
   */
  onRefused(fn: (r: BusRefusal) => Promise<void> | void): void {
    this.refusalListeners.push(fn);
  }
  async refused(r: BusRefusal): Promise<void> {
    await Promise.allSettled(this.refusalListeners.map(async (fn) => fn(r)));
  }
}

/** A request refused for its caller: what the audit records. */
export interface BusRefusal {
  subject: string;
  endpoint: string;
  requestId: string;
  /** The verified caller, when there was one. */
  caller: Caller | null;
  /** The actor the payload claimed, if any. */
  actor: unknown;
  /** The request as it arrived (validated against its contract): which task it named, say. */
  payload: unknown;
  reason: string;
}

/**
 * The bus identity a service's environment configures, or null (verification off). Both variables
 * or neither; with NODE_ENV=production, neither is refused. Throws with every problem, never a key.
 */
export function busIdentityFromEnv(service: string, env: Record<string, string | undefined>, production: boolean): BusIdentity | null {
  const priv = env[BUS_KEY_ENV];
  const pub = env[BUS_PUBLIC_KEYS_ENV];
  if (!priv && !pub) {
    if (production)
      throw new BusIdentityError(
        `${BUS_KEY_ENV} and ${BUS_PUBLIC_KEYS_ENV} are required with NODE_ENV=production: a service does not start without verified identity on the bus (ADR 0055)`,
      );
    return null;
  }
  if (!priv || !pub) throw new BusIdentityError(`${priv ? BUS_PUBLIC_KEYS_ENV : BUS_KEY_ENV} is required with ${priv ? BUS_KEY_ENV : BUS_PUBLIC_KEYS_ENV}`);
  const key = importPrivate(priv, BUS_KEY_ENV);
  if (production && DEV_ONLY_BUS_PUBLIC_KEYS.includes(createPublicKey(key).export({ format: 'der', type: 'spki' }).toString('base64')))
    throw new BusIdentityError(`${BUS_KEY_ENV} is the dev overlay's committed key, refused with NODE_ENV=production`);
  return new BusIdentity(service, key, parsePublicKeys(pub));
}

/** Removes this service's private bus key from an environment (runService: before any child can inherit it). */
export function withholdBusKey(env: Record<string, string | undefined>): void {
  delete env[BUS_KEY_ENV];
}

const identities = new WeakMap<NatsConnection, BusIdentity>();

/** Requests sent on `nc` are signed, and requests served on it verified, with this identity. */
export function bindBusIdentity(nc: NatsConnection, identity: BusIdentity): void {
  identities.set(nc, identity);
}
export function busIdentityOf(nc: NatsConnection): BusIdentity | undefined {
  return identities.get(nc);
}

/** What `/readyz` says: `verified` when this service signs and checks callers on the bus, else `off`. */
export const busIdentityDetail = (nc: NatsConnection): 'verified' | 'off' => (identities.has(nc) ? 'verified' : 'off');

/** The operator actor a payload claims, if it claims one. */
export function operatorActorOf(payload: unknown): VouchedOperator | undefined {
  const actor = (payload as { actor?: unknown } | null)?.actor as { type?: unknown; id?: unknown; workspaces?: unknown } | undefined;
  if (!actor || actor.type !== 'operator' || typeof actor.id !== 'string' || !Array.isArray(actor.workspaces)) return undefined;
  return { id: actor.id, workspaces: actor.workspaces as string[] };
}

/**
 * The rule (a plain function, tested on its own): may this request run, given its verified caller,
 * the operator a forwarded gateway assertion vouches for, and the callers its endpoint admits?
 * Returns why not, or null.
 * - An endpoint that names its callers admits only those services.
 * - An operator actor in the payload needs the gateway's word for exactly that operator: the
 *   gateway's own assertion, or its assertion forwarded by the service acting on its request.
 */
export function callerProblem(opts: {
  caller: Caller | null;
  forwardedOperator: VouchedOperator | undefined;
  payloadOperator: VouchedOperator | undefined;
  callers?: readonly string[] | undefined;
}): string | null {
  const { caller, forwardedOperator, payloadOperator, callers } = opts;
  if (callers && (!caller || !callers.includes(caller.service)))
    return `only ${callers.join(' and ')} may call this; the caller is ${caller ? caller.service : 'not verified'}`;
  if (payloadOperator) {
    if (!caller) return 'an operator actor without a verified caller';
    const vouched = caller.service === 'gateway' ? caller.operator : forwardedOperator;
    if (!vouched) return `an operator actor that the gateway did not vouch for (caller ${caller.service})`;
    if (!sameOperator(vouched, payloadOperator)) return 'the operator actor is not the one the gateway vouched for';
  }
  return null;
}

/** What a verified request may pass on: the gateway's assertion for the operator it acts for. */
export interface VerifiedCall {
  caller: Caller | null;
  /** The gateway assertion behind this request (its own, or forwarded to it), for requests its handler sends. */
  operatorAssertion?: string | undefined;
}

/**
 * Signs one outgoing request: the caller assertion, and the gateway's assertion when the payload
 * carries an operator actor on a gateway request's behalf. From the gateway, the operator claims are
 * the payload's actor: the gateway put it there from the operator's verified token.
 */
export async function signRequest(
  identity: BusIdentity,
  headers: { set(k: string, v: string): void },
  subject: string,
  data: Uint8Array,
  ttlMs: number,
  payload: unknown,
  forwardOperatorAssertion: string | undefined,
): Promise<void> {
  const operator = operatorActorOf(payload);
  headers.set(Headers.caller, await identity.assert(subject, data, ttlMs, identity.service === 'gateway' ? operator : undefined));
  if (operator && identity.service !== 'gateway' && forwardOperatorAssertion) headers.set(Headers.operator, forwardOperatorAssertion);
}

/**
 * Checks one incoming request (callerProblem's rule). Throws BusIdentityError with the reason;
 * else what its handler's own requests may pass on.
 */
export async function verifyRequest(
  identity: BusIdentity,
  msg: { subject: string; data: Uint8Array; headers?: { get(k: string): string } | undefined },
  payload: unknown,
  callers: readonly string[] | undefined,
): Promise<VerifiedCall> {
  const token = msg.headers?.get(Headers.caller) || undefined;
  const payloadOperator = operatorActorOf(payload);
  // A present assertion must verify, whatever the endpoint: a bad one is forged or misconfigured.
  const caller = token ? await identity.verify(token, msg.subject, msg.data) : null;
  let forwardedOperator: VouchedOperator | undefined;
  let operatorAssertion = caller?.service === 'gateway' && caller.operator ? token : undefined;
  const forwarded = msg.headers?.get(Headers.operator) || undefined;
  if (payloadOperator && caller && caller.service !== 'gateway' && forwarded) {
    const vouching = await identity.verify(forwarded, msg.subject, msg.data, true);
    if (vouching.service !== 'gateway') throw new BusIdentityError(`a forwarded operator assertion from ${vouching.service}, not the gateway`);
    forwardedOperator = vouching.operator;
    operatorAssertion = forwarded;
  }
  const problem = callerProblem({ caller, forwardedOperator, payloadOperator, callers });
  if (problem) throw new BusIdentityError(problem, caller);
  return { caller, operatorAssertion };
}
