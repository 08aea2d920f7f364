import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { StorageType, jetstreamManager } from '@nats-io/jetstream';
import { spawnNatsServer, type NatsServerHandle } from '@kandev/runtime/dev/nats-server';
import { writeNatsAuthConfig } from '@kandev/runtime/dev/nats-auth';
import { NATS_PERMISSIONS_FILE, type TestNats } from './nats.js';

/** One node of a test cluster: its own client port, route port and store, restartable. */
export interface ClusterNode {
  name: string;
  url: string;
  pid: number;
  /** kill -9 (no goodbye to its routes or clients), as a crashed node or pod. */
  kill(): void;
  /** Start it again after a kill or stop: same ports, same store, rejoins the cluster. */
  start(): Promise<void>;
}

export interface TestNatsCluster extends TestNats {
  nodes: ClusterNode[];
}

/** A free TCP port on loopback (bound and released: the server binds it a moment later). */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/**
 * A real nats-server cluster with JetStream on loopback: `size` nodes (3 for replicated streams and
 * KV), routes between all of them, each with its own store. `url` lists every node, so a client
 * fails over to another node when its own dies. Resolves once JetStream places a stream with `size`
 * replicas, so streams and buckets with 3 replicas can be created at once. `running` starts only
 * that many nodes (the others with `nodes[i].start()`): a cluster still forming; it resolves once a
 * stream with one replica can be placed.
 */
export async function startNatsCluster(size = 3, opts: { running?: number } = {}): Promise<TestNatsCluster> {
  const running = opts.running ?? size;
  const root = mkdtempSync(join(tmpdir(), 'kandev-nats-cluster-'));
  // Every node admits only the services' users (and the test's observer), as a single test server does (ADR 0054).
  const auth = writeNatsAuthConfig({ dir: join(root, 'auth'), permissionsFile: NATS_PERMISSIONS_FILE, observer: true });
  const credentials = { ...auth.users, observer: auth.observer! };
  const clientPorts = await Promise.all(Array.from({ length: size }, freePort));
  const routePorts = await Promise.all(Array.from({ length: size }, freePort));
  const routes = routePorts.map((p) => `nats://127.0.0.1:${p}`).join(',');
  let out = '';
  const handles: (NatsServerHandle | undefined)[] = [];
  const spawnNode = async (i: number) => {
    const h = await spawnNatsServer({
      storeDir: join(root, `n${i}`),
      port: clientPorts[i]!,
      configFile: auth.configFile,
      extraArgs: ['--name', `kandev-n${i}`, '--cluster_name', 'kandev-test', '--cluster', `nats://127.0.0.1:${routePorts[i]}`, '--routes', routes],
    });
    h.process.stderr?.on('data', (d: Buffer) => {
      if (out.length < 1_000_000) out += d.toString();
    });
    handles[i] = h;
  };
  await Promise.all(clientPorts.slice(0, running).map((_, i) => spawnNode(i)));
  const url = clientPorts.map((p) => `nats://127.0.0.1:${p}`).join(',');
  await jetStreamReady(url, credentials.observer, running === size ? size : 1);
  const nodes: ClusterNode[] = clientPorts.map((port, i) => ({
    name: `kandev-n${i}`,
    url: `nats://127.0.0.1:${port}`,
    get pid() {
      return handles[i]?.pid ?? -1;
    },
    kill() {
      handles[i]?.process.kill('SIGKILL');
    },
    async start() {
      await spawnNode(i);
    },
  }));
  const stopAll = () => Promise.all(handles.flatMap((h) => (h ? [h.stop()] : [])));
  const first = handles[0]!;
  return {
    url,
    port: first.port,
    pid: first.pid,
    process: first.process,
    storeDir: root,
    nodes,
    credentials,
    output: () => out,
    stop: async () => {
      await stopAll();
      rmSync(root, { recursive: true, force: true });
    },
    // Every node down for `downMs`, then back with its store: a whole-cluster outage.
    restart: async (downMs = 0) => {
      await stopAll();
      if (downMs) await new Promise((r) => setTimeout(r, downMs));
      await Promise.all(clientPorts.map((_, i) => spawnNode(i)));
    },
  };
}

/**
 * Polls until JetStream places a stream with `replicas` (created and deleted again). A meta leader
 * alone is not enough: one is elected as soon as a quorum of nodes is up, and until the last node
 * has joined, a stream with 3 replicas is refused with "no suitable peers for placement" (a service
 * starting then died at start in CI).
 */
async function jetStreamReady(url: string, login: { user: string; pass: string }, replicas: number, withinMs = 30_000): Promise<void> {
  const nc = await connect({ servers: url.split(','), timeout: 5_000, ...login });
  const until = Date.now() + withinMs;
  const probe = `KANDEV_TEST_READY_${process.pid}`;
  try {
    for (;;) {
      try {
        const jsm = await jetstreamManager(nc, { timeout: 1_000 });
        await jsm.streams.add({ name: probe, subjects: [`kandev.test.ready.${process.pid}`], num_replicas: replicas, storage: StorageType.Memory });
        await jsm.streams.delete(probe);
        return;
      } catch (e) {
        if (Date.now() > until) throw new Error(`JetStream of the test cluster not ready within ${withinMs} ms: ${(e as Error).message}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  } finally {
    await nc.close();
  }
}
