import { expect, it } from 'vitest';
import { agentTokenVerifier, signAgentToken } from '../src/jwt.js';

const SECRET = 'jwt-test-secret-0123456789';
const TASK = '00000000-0000-4000-8000-000000000001';

it('answers a token it verified before from memory, and refuses it once it has expired', async () => {
  const verify = agentTokenVerifier(SECRET);
  const token = await signAgentToken(SECRET, { task_id: TASK }, '2s');
  await expect(verify(token)).resolves.toMatchObject({ task_id: TASK, mode: 'task' });
  await expect(verify(token)).resolves.toMatchObject({ task_id: TASK });
  // JWT expiry has second granularity: poll until the remembered entry must have gone stale.
  const deadline = Date.now() + 10_000;
  let last: unknown;
  while (Date.now() < deadline) {
    last = await verify(token).catch((e: unknown) => e);
    if (last instanceof Error) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  expect(last).toMatchObject({ code: 'UNAUTHORIZED', message: 'token expired' });
});

it('does not remember a token that failed, and keeps at most maxEntries tokens', async () => {
  const verify = agentTokenVerifier(SECRET, 2);
  await expect(verify(await signAgentToken('another-secret-0123456789', { task_id: TASK }))).rejects.toMatchObject({ code: 'UNAUTHORIZED' });
  const tokens = await Promise.all([1, 2, 3].map((i) => signAgentToken(SECRET, { task_id: `00000000-0000-4000-8000-00000000000${i}` })));
  for (const t of tokens) await expect(verify(t)).resolves.toBeDefined();
  for (const t of tokens) await expect(verify(t)).resolves.toBeDefined();
});
