import { BaseEnv } from '@kandev/runtime';
import { McpMode } from '@kandev/contracts';
import { availableParallelism, totalmem } from 'node:os';
import { defaultMaxExecutions, usableMemory } from './domain/capacity.js';
import { z } from 'zod';
import { parseUidRange } from './domain/agent-uids.js';

const millis = (fallback: number) => z.coerce.number().int().nonnegative().default(fallback);

export const LifecycleEnv = BaseEnv.extend({
  /** Root of local state; this service keeps `lifecycle/<instance>.json` under it. */
  KANDEV_STATE_DIR: z.string().min(1).default('.kandev'),
  /** Grace between SIGTERM and SIGKILL when a stop names none. */
  TEARDOWN_GRACE_MS: millis(2000),
  /** How long agentctl waits for the agent to acknowledge a cancel before answering 504. */
  CANCEL_TIMEOUT_MS: millis(5000),
  /** Registry entry lifetime; the owner refreshes every TTL/3, so a dead owner's entries expire. */
  REGISTRY_TTL_MS: z.coerce.number().int().min(300).default(15_000),
  /** Upper bound on agentctl reaching `ready` (agent spawned, protocol handshake done). */
  LAUNCH_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  /** Agents this instance starts at the same time; more wait in its launch queue. */
  LAUNCH_CONCURRENCY: z.coerce
    .number()
    .int()
    .positive()
    .default(Math.max(2, availableParallelism() * 2)),
  /** How long a launch may wait in the queue to start; one predicted to wait longer is refused at once (503, Retry-After). */
  LAUNCH_QUEUE_WAIT_MS: z.coerce.number().int().nonnegative().default(5_000),
  /**
   * Executions this instance runs at most (live ones plus launches in progress); one more launch or
   * reservation is refused at once (503, Retry-After) and goes to another instance on retry. 0 = no
   * cap. Unset: from memory, floor(0.75 × memory / 128 MiB), memory being the cgroup limit or the
   * host's (domain/capacity.ts, docs/operations.md).
   */
  MAX_EXECUTIONS: z.coerce
    .number()
    .int()
    .nonnegative()
    .default(() => defaultMaxExecutions(usableMemory(totalmem(), process.constrainedMemory()))),
  /** `life.<instance>.drain` without `wait_ms`: how long running executions may go on before the drain stops (or leaves) them. */
  DRAIN_WAIT_MS: millis(20_000),
  /**
   * How long a place reserved by `life.exec.reserve` (the orchestrator's admission check before it
   * writes a session, ADR 0026) waits for its launch; then it is dropped.
   */
  LAUNCH_RESERVATION_TTL_MS: z.coerce.number().int().positive().default(5_000),
  MCP_PORT: z.coerce.number().int().min(0).max(65535).default(8090),
  /** MCP endpoint handed to agents; unset = the local mcp service on MCP_PORT (see mcpPublicUrl). */
  MCP_PUBLIC_URL: z.url().optional(),
  /** MCP mode minted into agent tokens when the launch request names none (a request's mode wins). */
  AGENT_MCP_MODE: McpMode.default('task'),
  /**
   * Agents die with this instance (agentctl watches its stdin pipe), so a crashed lifecycle leaves no
   * agent running (B-4). The start-up cleanup of leftovers stays as the second line; its test
   * turns this off to exercise it.
   */
  AGENTS_EXIT_WITH_LIFECYCLE: z.preprocess((v) => (v === undefined || v === '' ? true : v === true || v === 'true' || v === '1'), z.boolean()),
  /**
   * With AGENTS_EXIT_WITH_LIFECYCLE: an agent also stops when this instance has been silent (frozen,
   * hung) this long, as its heartbeat to agentctl rides on the registry refresh. Unset = twice the
   * registry TTL (domain/liveness.ts): a stall shorter than that can still be re-admitted on resume.
   */
  AGENT_OWNER_SILENCE_MS: z.coerce.number().int().positive().optional(),
  /**
   * Agents run this many nice levels below the control plane (agentctl stays at this service's
   * priority): what an agent runs cannot starve a stop or a cancel of CPU. 0 = same priority.
   */
  AGENT_NICE: z.coerce.number().int().min(0).max(19).default(10),
  /**
   * `auto`: every stopping execution's processes go into one cpu cgroup of the host, where this
   * service can make one (ADR 0046); `off`: each stopping session's autogroup is lowered instead.
   */
  STOPPING_CPU_GROUP: z.enum(['auto', 'off']).default('auto'),
  /** Path of the agentctl program; unset = the @kandev/agentctl package's bundle (ADR 0051). */
  AGENTCTL_BIN: z.string().min(1).optional(),
  /**
   * Agents are untrusted (R-9.1, ADR 0017): where this service is root (or holds CAP_SETUID,
   * CAP_SETGID, CAP_CHOWN and CAP_KILL), each execution's agentctl and agent run under a uid and
   * gid of this range of their own. A uid is reused only once no process holds it.
   */
  AGENT_UID_RANGE: z
    .string()
    .default('20000-29999')
    .refine((v) => typeof parseUidRange(v) !== 'string', { message: 'must look like "20000-29999", start at 1000 or above and not end before it starts' }),
  /** `off` runs agents under this service's own uid even where it could isolate them (debugging only; /readyz says `same_uid`). */
  AGENT_ISOLATION: z.enum(['auto', 'off']).default('auto'),
  /**
   * `auto`: where agents have uids of their own and nftables is usable, an execution's uid reaches
   * only the MCP endpoint, DNS, the trace collector and AGENT_LOOPBACK_PORTS on this host's loopback
   * (ADR 0057); `off`: agents reach whatever listens there (/readyz says `unrestricted`).
   */
  AGENT_NETWORK: z.enum(['auto', 'off']).default('auto'),
  /** Further loopback ports agents may reach (comma-separated), e.g. a local model proxy. */
  AGENT_LOOPBACK_PORTS: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter(Boolean)
        .map(Number),
    )
    .refine((ports) => ports.every((p) => Number.isInteger(p) && p > 0 && p < 65_536), { message: 'must be a comma-separated list of ports (1-65535)' }),
  /** Root of the agents' task directories (`<root>/<workspace_id>/<task_id>`); unset = `<KANDEV_STATE_DIR>/work`. */
  KANDEV_WORK_DIR: z.string().min(1).optional(),
  /**
   * Names of this service's variables that agents also get (comma-separated), on top of PATH,
   * locale, proxies and the catalogue entry's own `env`. Nothing else of this environment reaches
   * an agent.
   */
  AGENT_ENV_PASSTHROUGH: z
    .string()
    .default('')
    .transform((v) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter((s) => /^[A-Za-z_][A-Za-z0-9_]*$/.test(s)),
    ),
});
export type LifecycleEnv = z.infer<typeof LifecycleEnv>;

export const mcpPublicUrl = (env: LifecycleEnv): string => env.MCP_PUBLIC_URL ?? `http://127.0.0.1:${env.MCP_PORT}/mcp`;
