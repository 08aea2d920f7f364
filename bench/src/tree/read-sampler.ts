import { parentPort, workerData } from 'node:worker_threads';

/*
 * A worker thread that reads `GET /sessions/:id` one at a time, a new read at most every `paceMs`
 * (closed loop: a stalled read is one long sample, not a queue of them), rotating over the given
 * sessions, until told to stop. Its own event loop: the bench's main thread polls /proc and the
 * database meanwhile and would otherwise delay the reads' timing. Each sample is its start
 * (performance.timeOrigin-relative epoch ms) and its latency.
 */
interface Input {
  url: string;
  token: string;
  sessions: string[];
  paceMs: number;
}

const { url, token, sessions, paceMs } = workerData as Input;
let stop = false;
let failures = 0;
const samples: Array<[number, number]> = [];
parentPort!.on('message', (m) => {
  if (m === 'stop') stop = true;
});

for (let i = 0; !stop; i++) {
  const started = performance.now();
  try {
    const res = await fetch(`${url}/sessions/${sessions[i % sessions.length]}`, { headers: { authorization: `Bearer ${token}` } });
    await res.text();
    if (res.status !== 200) failures++;
  } catch {
    failures++;
  }
  const ms = performance.now() - started;
  samples.push([performance.timeOrigin + started, ms]);
  const wait = paceMs - ms;
  await new Promise((r) => setTimeout(r, Math.max(0, wait)));
}
parentPort!.postMessage({ samples, failures });
