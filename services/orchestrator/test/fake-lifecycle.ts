import { randomUUID } from 'node:crypto';
import { Buckets, conflict, KandevError, Life, Orch, type Execution, type LaunchRequest, type RequestOf } from '@kandev/contracts';
import { createLogger, on, RegistryReader, request, serveEndpoints, type NatsConnection } from '@kandev/runtime';
import { jetstreamManager } from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';

/**
 * The lifecycle service faked at the subject level: a registry that answers the same endpoints
 * from memory and, as the real one, writes every entry to the real KV bucket (which the
 * orchestrator's child stop reads itself, ADR 0011); calls the real orchestrator's admit, and
 * records every stop and cancel.
 */
export class FakeLifecycle {
  readonly registry = new Map<string, Execution>();
  readonly stops: Array<{ execution_id: string; reason: string; orphaned?: boolean | undefined }> = [];
  /** Every cancel request as it arrived (an interrupt's carries `escalate: false`). */
  readonly cancels: RequestOf<typeof Life.cancel>[] = [];
  /** Execution ids of every exact registry read (Life.get). */
  readonly gets: string[] = [];
  readonly prompts: Array<{ execution_id: string; turn_id: string; prompt: string; context?: string | undefined }> = [];
  /** Test hooks. */
  beforeAdmit: ((req: LaunchRequest) => Promise<void>) | null = null;
  /** Life.list / Life.get fail; see failRegistry for the bucket. */
  registryFails = false;
  private kv: KV | null = null;
  /** The catalogue this fake can launch; a launch of anything else fails like the real one. */
  readonly agents = new Set(['scripted-acp', 'scripted-codex']);
  /** Execution ids of every launch request, and of every reservation (ADR 0026). */
  readonly launches: string[] = [];
  readonly reservations: string[] = [];
  /** Refuse every reservation with this error (an overloaded lifecycle's admission, ADR 0026). */
  reserveFails: KandevError | null = null;
  /** Make the next launches fail (as an overloaded or crashing lifecycle would). */
  launchFails: KandevError | null = null;
  /** `hang`: the owner took the request and never answers (it died mid-request) until `releaseHung()`. */
  cancelBehaviour: 'cancel' | 'timeout' | 'hang' = 'cancel';
  /** `hang`: the owner never answers a prompt hand-off (it died after answering a cancel) until `releaseHung()`. */
  promptBehaviour: 'accept' | 'hang' = 'accept';
  /** The executions of each `stop_many` request, in order (each of its stops is in `stops` too). */
  readonly stopManyRequests: string[][] = [];

  private async stopOne(req: { execution_id: string; reason: string; orphaned?: boolean | undefined }) {
    this.stops.push(req);
    if (this.stopFails) throw this.stopFails;
    const e = this.registry.get(req.execution_id);
    if (!e) return { accepted: false, execution_id: req.execution_id, already_gone: true };
    e.status = 'STOPPING';
    await this.save(e);
    return { accepted: true, execution_id: req.execution_id, already_gone: false };
  }

  /** Runs as a cancel reaches this owner, before it answers (an agentctl releasing what the agent waits on). */
  onCancel: ((req: { execution_id: string }) => Promise<void>) | null = null;
  /** Answer every stop request with this error (an owner that takes the request and fails it). */
  stopFails: KandevError | null = null;
  /** Stopped (SIGSTOP): registry requests and stops wait until `releaseHung()`, then are answered. */
  stalled = false;
  private hung: Array<() => void> = [];
  private async stall() {
    if (this.stalled) await new Promise<void>((r) => this.hung.push(r));
  }
  releaseHung() {
    for (const r of this.hung.splice(0)) r();
  }
  constructor(
    private readonly nc: NatsConnection,
    readonly instanceId = 'life-fake',
  ) {}

  async start() {
    this.kv = await new Kvm(this.nc).create(Buckets.executions, { history: 1 });
    const log = createLogger('fake-lifecycle', 'silent');
    await serveEndpoints(this.nc, { service: 'lifecycle', instanceId: this.instanceId, queue: 'lifecycle', log }, [
      on(Life.launch, async (req) => {
        this.launches.push(req.execution_id);
        return this.launch(req);
      }),
      on(Life.reserveLaunch, async (req) => {
        if (this.reserveFails) throw this.reserveFails;
        this.reservations.push(req.execution_id);
        return { reserved: true as const, instance_id: this.instanceId };
      }),
      on(Life.agents, async () => ({ agents: [...this.agents].sort() })),
      on(Life.list, async (req) => {
        await this.stall();
        if (this.registryFails) throw new Error('registry unavailable');
        return [...this.registry.values()].filter((e) => e.task_id === req.task_id);
      }),
      on(Life.get, async (req) => {
        this.gets.push(req.execution_id);
        await this.stall();
        if (this.registryFails) throw new Error('registry unavailable');
        return this.registry.get(req.execution_id) ?? null;
      }),
    ]);
    await serveEndpoints(this.nc, { service: 'lifecycle', instanceId: this.instanceId, queue: '', log }, [
      on(Life.stop.at(this.instanceId), async (req) => {
        await this.stall();
        return this.stopOne(req);
      }),
      on(Life.stopMany.at(this.instanceId), async (req) => {
        await this.stall();
        this.stopManyRequests.push(req.stops.map((x) => x.execution_id));
        const results = [];
        for (const stop of req.stops)
          results.push(await this.stopOne(stop).catch((e: KandevError) => ({ execution_id: stop.execution_id, error: e.toBody() })));
        return { results };
      }),
      on(Life.cancel.at(this.instanceId), async (req) => {
        this.cancels.push(req);
        if (this.onCancel) await this.onCancel(req);
        const e = this.registry.get(req.execution_id);
        if (!e || e.status !== 'RUNNING') return { cancelled: false, turn_id: null, stop_reason: null, reason: 'no_active_turn' };
        if (this.cancelBehaviour === 'timeout') {
          // As the lifecycle answers (services/lifecycle flows/turns.ts): an interrupt's cancel
          // (escalate: false) is UNAVAILABLE; an operator's cancel escalates to a teardown and says so.
          if (req.escalate === false) throw new KandevError('UNAVAILABLE', 'agent did not acknowledge cancel');
          e.status = 'STOPPING';
          await this.save(e);
          throw new KandevError('CONFLICT', 'agent did not acknowledge the cancel within 1000 ms; it is being torn down', {
            escalation: 'teardown',
            reason: 'cancel_unacknowledged',
            execution_id: e.execution_id,
            turn_id: e.turn_id,
            grace_ms: 500,
            cancel_timeout_ms: 1000,
          });
        }
        if (this.cancelBehaviour === 'hang') {
          await new Promise<void>((r) => this.hung.push(r));
          throw new KandevError('UNAVAILABLE', 'released');
        }
        const turn = e.turn_id;
        e.status = 'READY';
        e.turn_id = null;
        await this.save(e);
        return { cancelled: true, turn_id: turn, stop_reason: 'cancelled', reason: null };
      }),
      on(Life.prompt.at(this.instanceId), async (req) => {
        if (this.promptBehaviour === 'hang') {
          await new Promise<void>((r) => this.hung.push(r));
          throw new KandevError('UNAVAILABLE', 'released');
        }
        const e = this.registry.get(req.execution_id);
        if (!e) throw conflict('no such execution');
        if (e.status === 'RUNNING') throw conflict('turn in flight');
        e.status = 'RUNNING';
        e.turn_id = req.turn_id;
        await this.save(e);
        this.prompts.push(req);
        return { turn_id: req.turn_id };
      }),
    ]);
  }

  private async launch(req: LaunchRequest): Promise<Execution> {
    if (!this.agents.has(req.agent)) throw new KandevError('VALIDATION_ERROR', `unknown agent "${req.agent}"`);
    if (this.launchFails) throw this.launchFails;
    const now = new Date().toISOString();
    const e: Execution = {
      execution_id: req.execution_id ?? randomUUID(),
      session_id: req.session_id,
      task_id: req.task_id,
      workspace_id: req.workspace_id,
      instance_id: this.instanceId,
      protocol: 'acp',
      agent: req.agent,
      pid: 100000 + this.registry.size,
      agentctl_pid: null,
      agentctl_url: null,
      status: 'READY',
      turn_id: null,
      fence_epoch: req.fence_epoch,
      started_at: now,
      updated_at: now,
    };
    this.registry.set(e.execution_id, e);
    await this.save(e);
    if (this.beforeAdmit) await this.beforeAdmit(req);
    const verdict = await request(this.nc, Orch.executionAdmit, {
      execution_id: e.execution_id,
      task_id: e.task_id,
      session_id: e.session_id,
      fence_epoch: e.fence_epoch,
      instance_id: this.instanceId,
    });
    if (!verdict.admitted) {
      await this.forget(e.execution_id);
      throw conflict(`launch fenced: ${verdict.reason}`);
    }
    if (req.prompt && req.turn_id) {
      e.status = 'RUNNING';
      e.turn_id = req.turn_id;
      await this.save(e);
      this.prompts.push({ execution_id: e.execution_id, turn_id: req.turn_id, prompt: req.prompt, context: req.context });
    }
    return e;
  }

  /** Simulate the process going away (registry entry removed, as lifecycle does after teardown). */
  async forget(executionId: string) {
    const e = this.registry.get(executionId);
    this.registry.delete(executionId);
    if (e) await this.kv!.delete(RegistryReader.key(e.task_id, e.execution_id));
  }

  /** The bucket loses the entry (a refresh held up past the TTL) while this owner still runs the process. */
  async lapse(executionId: string) {
    const e = this.registry.get(executionId)!;
    await this.kv!.delete(RegistryReader.key(e.task_id, e.execution_id));
  }

  /** The entry as the real lifecycle puts it (tests that change an entry in place call this to publish the change). */
  async save(e: Execution) {
    await this.kv!.put(RegistryReader.key(e.task_id, e.execution_id), JSON.stringify(e));
  }

  /**
   * The registry bucket unreadable (its stream gone), or back with every entry this fake holds.
   * Life.list and Life.get fail meanwhile too.
   */
  async failRegistry(fail: boolean) {
    this.registryFails = fail;
    if (fail) {
      await (await jetstreamManager(this.nc)).streams.delete(`KV_${Buckets.executions}`);
      return;
    }
    this.kv = await new Kvm(this.nc).create(Buckets.executions, { history: 1 });
    for (const e of this.registry.values()) await this.save(e);
  }
}
