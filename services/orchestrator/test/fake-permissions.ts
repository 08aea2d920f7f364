import { randomUUID } from 'node:crypto';
import { conflict, LifePermission, notFound, type AgentPermissionOutcome, type PermissionAnswered, type PermissionOption } from '@kandev/contracts';
import { createLogger, EventPublisher, on, serveEndpoints, type EventScope, type NatsConnection } from '@kandev/runtime';

interface FakeRequest {
  execution_id: string;
  permission_id: string;
  turn_id: string | null;
  title: string;
  options: PermissionOption[];
  scope: EventScope;
  settled: { outcome: AgentPermissionOutcome; option_id: string | null } | null;
}

export const OPTIONS: PermissionOption[] = [
  { option_id: 'allow', name: 'Allow', kind: 'allow_once' },
  { option_id: 'reject', name: 'Reject', kind: 'reject_once' },
];

/**
 * agentctl's pending-permission table and the lifecycle's relay of it, faked at the subject level:
 * `life.<instance>.exec.permission.respond` settles a request once (a later different answer is
 * CONFLICT with how it ended, as agentctl answers), and every settlement is published as
 * `agent.permission_resolved`, as the lifecycle relays agentctl's line.
 */
export class FakeAgentPermissions {
  readonly requests = new Map<string, FakeRequest>();
  readonly answers: Array<{ permission_id: string; option_id?: string | undefined; cancelled?: true | undefined }> = [];
  private readonly pub: EventPublisher;

  constructor(
    private readonly nc: NatsConnection,
    private readonly instanceId = 'life-fake',
  ) {
    this.pub = new EventPublisher(nc);
  }

  async start() {
    await serveEndpoints(this.nc, { service: 'lifecycle', instanceId: this.instanceId, queue: '', log: createLogger('fake-permissions', 'silent') }, [
      on(LifePermission.respond.at(this.instanceId), async (req) => this.answer(req)),
    ]);
  }

  /** The agent asks: the `agent.permission_requested` event the lifecycle would publish (returned for redelivery tests). */
  async ask(scope: EventScope, execution_id: string, turn_id: string | null, title = 'run ls?') {
    const permission_id = randomUUID();
    this.requests.set(permission_id, { execution_id, permission_id, turn_id, title, options: OPTIONS, scope, settled: null });
    const ev = await this.pub.emit('agent.permission_requested', scope, { execution_id, permission_id, turn_id, title, options: OPTIONS });
    return { permission_id, event: ev };
  }

  /** agentctl's cancelAll for one execution (a turn cancel or a stop). */
  async cancelAll(execution_id: string) {
    for (const r of this.requests.values()) if (r.execution_id === execution_id && !r.settled) await this.settle(r, 'cancelled', null);
  }

  private async answer(req: { permission_id: string; option_id?: string | undefined; cancelled?: true | undefined }): Promise<PermissionAnswered> {
    this.answers.push(req);
    const r = this.requests.get(req.permission_id);
    if (!r) throw notFound('no permission request');
    const wanted = req.cancelled ? null : req.option_id!;
    if (r.settled) {
      if (r.settled.option_id === wanted) return { permission_id: r.permission_id, ...r.settled };
      throw conflict(`permission request was already ${r.settled.outcome}`, { permission_id: r.permission_id, ...r.settled });
    }
    const outcome: AgentPermissionOutcome = wanted === null ? 'cancelled' : wanted === 'allow' ? 'allowed' : 'denied';
    await this.settle(r, outcome, wanted);
    return { permission_id: r.permission_id, outcome, option_id: wanted };
  }

  private async settle(r: FakeRequest, outcome: AgentPermissionOutcome, option_id: string | null) {
    // Settled before anything is awaited: this is the arbiter, as agentctl's map is.
    r.settled = { outcome, option_id };
    await this.pub.emit('agent.permission_resolved', r.scope, {
      execution_id: r.execution_id,
      permission_id: r.permission_id,
      turn_id: r.turn_id,
      outcome,
      option_id,
      asked: { title: r.title, options: r.options },
    });
  }
}
