import type { Scenario } from '../scenario.js';
import { measure } from '../stats.js';

const enc = new TextEncoder();

/** Core NATS request/reply with nothing on top: the floor every other figure is compared with. */
const scenario: Scenario = {
  name: 'bare NATS request/reply',
  async run(ctx) {
    const server = await ctx.connect('bench-bare-responder');
    const client = await ctx.connect('bench-bare-requester');
    // Same bytes the helper scenario exchanges, so only the helper's own work differs.
    const reply = enc.encode(JSON.stringify({ ok: true, result: { service: 'bench', instance_id: 'bench-1' } }));
    const sub = server.subscribe('bench.bare.ping', { callback: (_err, msg) => void msg.respond(reply) });
    ctx.defer(() => sub.unsubscribe());
    await server.flush();
    const body = enc.encode('{}');
    const stats = await measure(() => client.request('bench.bare.ping', body, { timeout: 5_000 }), ctx);
    return [{ id: 'nats.request.bare', label: '`nc.request` → bare `nc.subscribe` responder (two connections)', stats }];
  },
};
export default scenario;
