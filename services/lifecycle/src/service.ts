import { SERVICE_KEYS, workDirRoot, type ServiceDefinition, packageVersion } from '@kandev/runtime';
import { CATALOGUE_ENV, loadCatalogue } from '@kandev/agentctl';
import { describeHost, hostSupport } from '@kandev/runtime/host';
import { dirname, resolve } from 'node:path';
import { defaultAgentctlBin } from './agentctl/process.js';
import { catalogueEndpoints, launchEndpoints } from './endpoints/launch.js';
import { ownedExecutionEndpoints } from './endpoints/owned.js';
import { registryEndpoints } from './endpoints/registry.js';
import { LifecycleEnv, mcpPublicUrl } from './env.js';
import { cleanUpLeftovers } from './flows/startup-cleanup.js';
import { EventJournal } from './store/event-journal.js';
import { ExecutionRegistry } from './store/registry.js';
import { StateFile } from './store/state-file.js';
import { AgentIsolation } from './isolation/agent-isolation.js';
import { catalogueSettingsProblems } from './isolation/agent-settings.js';
import { StoppingCpu } from './isolation/stopping-cpu.js';
import { AgentNetwork, allowedLoopbackPorts } from './isolation/agent-network.js';
import { ExecutionSupervisor } from './supervisor.js';

/**
 * Execution registry, launch, cancel and teardown (R-3, R-6, B-1, B-2, B-4). The only
 * component that signals agent processes.
 */
export const lifecycleService: ServiceDefinition<typeof LifecycleEnv> = {
  name: 'lifecycle',
  version: packageVersion(import.meta.url),
  env: LifecycleEnv,
  // Mints the agent token of each execution (flows/launch.ts); never sees the operator key.
  keys: SERVICE_KEYS.lifecycle,
  async start(rt) {
    const { env, instanceId, log } = rt;
    // What this host lets the isolation and the stopping cpu group plan on, said once (ADR 0076).
    log.info({ host: describeHost(hostSupport()) }, 'host');
    const registry = await ExecutionRegistry.open(rt.nc, env.REGISTRY_TTL_MS, log, env.KANDEV_JS_REPLICAS);
    const stateFile = new StateFile(env.KANDEV_STATE_DIR, instanceId);
    const isolation = new AgentIsolation({ workRoot: workDirRoot(env), uidRange: env.AGENT_UID_RANGE, setting: env.AGENT_ISOLATION, log });
    // Before anything is written there: this service's own state is not for agents to read.
    isolation.prepareRoots(env.KANDEV_STATE_DIR, dirname(stateFile.path));
    rt.addReadinessDetail('agent_isolation', () => isolation.mode);
    // what agent uids cannot reach is refused now, in words, not at every launch later.
    const agentctlBin = env.AGENTCTL_BIN ?? defaultAgentctlBin();
    const agentPaths = () => ({
      stateDir: resolve(env.KANDEV_STATE_DIR),
      agentctlBin: resolve(agentctlBin),
      nodeBin: process.execPath,
      agents: [...loadCatalogue(process.env).values()],
      catalogueFile: process.env[CATALOGUE_ENV] ? resolve(process.env[CATALOGUE_ENV]) : undefined,
      PATH: process.env.PATH,
    });
    const problems = isolation.agentAccessProblems(agentPaths());
    if (problems.length > 0) {
      const words = isolation.refusal(problems);
      log.error({ problems: problems.map((p) => ({ path: p.blocked, target: p.target.path })) }, words);
      throw new Error(words);
    }
    // too: every settings_from source is read now, as each launch will read it, so a missing,
    // unreadable or oversized one (or a link inside it) refuses the start in words.
    const settingsProblems = await catalogueSettingsProblems(process.env);
    if (settingsProblems.length > 0) {
      const words = `the agent catalogue's settings cannot be used: ${settingsProblems.join('; ')}`;
      log.error({ problems: settingsProblems }, words);
      throw new Error(words);
    }
    // The same check on every /readyz: a directory made private after the start stops launches too.
    const agentAccess = () => {
      try {
        const now = isolation.agentAccessProblems(agentPaths());
        return now.length === 0 ? 'ok' : isolation.refusal(now);
      } catch (e) {
        return (e as Error).message; // a catalogue file broken since the start
      }
    };
    rt.addReadinessDetail('agent_access', agentAccess);
    rt.addReadinessCheck(async () => agentAccess() === 'ok');
    // Agents and loopback (ADR 0057): each execution's uid reaches only the MCP endpoint (and DNS,
    // the collector) on this host's loopback, where nftables is usable.
    const network = await AgentNetwork.open({
      setting: env.AGENT_NETWORK,
      isolated: isolation.mode === 'uid_per_execution',
      ports: allowedLoopbackPorts(mcpPublicUrl(env), env.OTEL_EXPORTER_OTLP_ENDPOINT, env.AGENT_LOOPBACK_PORTS),
      log,
    });
    isolation.network = network;
    if (network.mode === 'unrestricted' && isolation.mode === 'uid_per_execution')
      log.warn(
        { agent_network: network.mode, why: network.why },
        "agents reach every listener on this host's loopback (NATS, PostgreSQL, health ports, other agentctls): docs/security.md",
      );
    else log.info({ agent_network: network.mode, why: network.why }, "agents' loopback");
    rt.addReadinessDetail('agent_network', () => network.mode);
    const stoppingCpu = StoppingCpu.open({ nice: env.AGENT_NICE, group: env.STOPPING_CPU_GROUP, log });
    rt.addReadinessDetail('stopping_cpu', () => stoppingCpu.mode);
    // Events a previous run recorded but never saw acknowledged go out first (ADR 0008).
    const journal = new EventJournal(env.KANDEV_STATE_DIR, instanceId, rt.publisher, log);
    journal.open();
    // Before serving anything: a previous run with this instance id may have left agents behind.
    const lost = await cleanUpLeftovers({ instanceId, stateFile, registry, journal, uids: isolation, log });
    if (lost) log.warn({ lost }, 'cleaned up executions of a previous run');

    const supervisor = new ExecutionSupervisor({
      env,
      instanceId,
      nc: rt.nc,
      log,
      journal,
      registry,
      stateFile,
      agentctlBin,
      agentKey: rt.key('agent'),
      isolation,
      stoppingCpu,
    });
    supervisor.startRefreshing();
    rt.onStop(async () => {
      await supervisor.shutdown();
      stateFile.flush(); // removals still gathering (StateFile.remove) are written now
      // What cannot be published within the budget stays in the journal for the next start.
      if (!(await journal.drain(Math.floor(env.SHUTDOWN_TIMEOUT_MS * 0.2))))
        log.warn({ pending: journal.pending, path: journal.path }, 'events still unpublished at shutdown; the next start publishes them');
      journal.close();
      await network.close();
    });
    // Not ready once draining: the rollout (and an operator) sees that this pod takes no launches.
    rt.addReadinessCheck(async () => !supervisor.isDraining);
    rt.addReadinessDetail('draining', () => supervisor.isDraining);
    rt.addReadinessDetail('executions', () => supervisor.heldCount);
    if (env.MAX_EXECUTIONS > 0) rt.addReadinessDetail('max_executions', () => env.MAX_EXECUTIONS);
    await rt.serve([
      ...registryEndpoints(registry, { get: (id) => supervisor.registeredRecord(id), ofTask: (taskId) => supervisor.registeredRecordsOfTask(taskId) }),
      ...catalogueEndpoints(),
    ]);
    // What acts on executions (launch, prompt, cancel, stop, drain) is taken from the orchestrator and
    // lifecycle only, verified on the bus (ADR 0055): another service's NATS password is not enough.
    await rt.serve(ownedExecutionEndpoints(supervisor, instanceId), { callers: EXECUTION_CALLERS });
    // Launch intake on a subscription set of its own, which a drain ends (Life.drain).
    const intake = await rt.serve(launchEndpoints(supervisor), { callers: EXECUTION_CALLERS });
    supervisor.setLaunchIntake(async () => void (await intake.stop()));
    log.info({ state_file: stateFile.path, registry_ttl_ms: env.REGISTRY_TTL_MS, max_executions: env.MAX_EXECUTIONS }, 'lifecycle ready');
  },
};

/** The services whose requests may act on executions (ADR 0055). */
const EXECUTION_CALLERS = ['orchestrator', 'lifecycle'] as const;
