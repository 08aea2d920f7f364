import type { AgentExit, AgentProcess } from '../agent-process.js';
import type { AgentSpec } from '../catalogue.js';
import type { Logger } from '../log.js';
import type { AdapterOptions, AdapterSink } from './adapter.js';
import { PendingPermissions, type PermissionAnswerChoice, type PermissionAnswerResult } from './permissions.js';

/**
 * What both protocol adapters share: the agent process they talk to (spawned in `start`) and the
 * permission requests the agent is waiting on.
 */
export abstract class ProcessAdapter<PermissionAnswer> {
  protected process: AgentProcess | undefined;
  protected readonly permissions: PendingPermissions<PermissionAnswer>;

  constructor(
    protected readonly spec: AgentSpec,
    protected readonly options: AdapterOptions,
    protected readonly sink: AdapterSink,
    protected readonly log: Logger,
  ) {
    this.permissions = new PendingPermissions(sink);
  }

  get pid(): number {
    return this.agent.pid;
  }

  get exited(): Promise<AgentExit> {
    return this.agent.exited;
  }

  answerPermission(permissionId: string, choice: PermissionAnswerChoice): PermissionAnswerResult {
    return this.permissions.answer(permissionId, choice);
  }

  kill(): void {
    this.process?.killTree();
  }

  protected get agent(): AgentProcess {
    if (!this.process) throw new Error('agent not started');
    return this.process;
  }
}
