import postgres from 'postgres';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { lockSession } from '../src/store/sessions.js';
import { appendTranscriptItem } from '../src/store/transcript.js';
import { startHarness, type Harness } from './harness.js';

/**
 * The session guard (a control transaction's lock on the session row) must not block the rows that
 * merely reference the session. A foreign-key check takes KEY SHARE on the referenced row; a guard
 * taken FOR UPDATE conflicts with it, so the transcript consumer (holding the session's
 * transcript_state row) waited on the guard while the guard's holder (a prompt, a question) waited
 * on transcript_state: a deadlock, and the control request answered INTERNAL_ERROR (seen right after
 * cancels under load). FOR NO KEY UPDATE excludes every other guard and lets the check through, as
 * the task locks already do (store/tasks.ts).
 */
let h: Harness;
let guardSql: postgres.Sql;
let writerSql: postgres.Sql;

beforeAll(async () => {
  h = await startHarness();
  const opts = { max: 1, onnotice: () => undefined, connection: { search_path: 'orchestrator' } };
  guardSql = postgres(h.db.url, opts);
  writerSql = postgres(h.db.url, opts);
});
afterAll(async () => {
  await Promise.all([guardSql?.end(), writerSql?.end()]);
  await h?.stop();
});

it('a transcript item referencing a guarded session is written while the guard is held (no foreign-key wait, so no deadlock)', async () => {
  const ws = await h.workspace();
  const task = await h.task(ws.id, 'guarded');
  const session = await h.startSession(task.id, 'first prompt');

  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let locked!: () => void;
  const isLocked = new Promise<void>((r) => (locked = r));
  const guard = guardSql.begin(async (tx) => {
    expect(await lockSession(tx, session.id)).not.toBeNull();
    locked();
    await held;
  });
  // A guard that could not be taken ends the test here, not at its timeout.
  await Promise.race([isLocked, guard]);

  try {
    // What the transcript consumer does for an agent's new item, bounded so that a wait on the guard fails the test.
    const written = await writerSql.begin(async (tx) => {
      await tx`SET LOCAL lock_timeout = '5s'`;
      return appendTranscriptItem(tx, { session_id: session.id, turn_id: null, role: 'agent', kind: 'agent_text', text: 'streamed while guarded' });
    });
    expect(written.map((w) => w.text)).toEqual(['streamed while guarded']);
  } finally {
    release();
    await guard;
  }
});
