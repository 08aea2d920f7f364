import type { Logger, NatsConnection } from '@kandev/runtime';
import type { LifecycleEnv } from '../env.js';
import type { StoppingCpu } from '../isolation/stopping-cpu.js';
import type { AgentIsolation } from '../isolation/agent-isolation.js';
import type { LiveExecution } from '../live-execution.js';
import type { EventJournal } from '../store/event-journal.js';
import type { ExecutionRegistry } from '../store/registry.js';
import type { StateFile } from '../store/state-file.js';
import type { TeardownExecutor } from './teardown.js';

/** What one lifecycle instance is built from (service.ts). */
export interface LifecycleDeps {
  env: LifecycleEnv;
  instanceId: string;
  nc: NatsConnection;
  log: Logger;
  journal: EventJournal;
  registry: ExecutionRegistry;
  stateFile: StateFile;
  agentctlBin: string;
  /** Signs the agent token of each execution (ADR 0020). */
  agentKey: string;
  /** Uid and directory of each execution. */
  isolation: AgentIsolation;
  /** Where a stopping execution's processes go to rank below the control plane (ADR 0046). */
  stoppingCpu: StoppingCpu;
}

/** What the flows of one instance share: the executions it owns and the one teardown executor. */
export interface Executions {
  readonly deps: LifecycleDeps;
  readonly live: Map<string, LiveExecution>;
  readonly teardowns: TeardownExecutor;
  shuttingDown(): boolean;
}
