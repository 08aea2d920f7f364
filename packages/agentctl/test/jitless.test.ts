import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { killAll, startAgentctl } from './harness.js';

afterEach(killAll);

const COUNTER = fileURLToPath(new URL('./fixtures/count-compiled-functions.mjs', import.meta.url));

describe('agentctl builds no function at run time (zod-jitless.ts)', () => {
  it('through a handshake, a prompt and a stop, zod compiles no schema into a function', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'agentctl-jitless-')), 'compiled');
    const ctl = await startAgentctl('scripted-acp', [], { NODE_OPTIONS: `--import ${COUNTER}`, COMPILED_FUNCTIONS_FILE: file });
    await ctl.prompt('hello', 'turn-1');
    await ctl.waitForEvent('turn_completed');
    const stopped = await ctl.http('POST', '/api/v1/stop', { grace_ms: 500 });
    expect(stopped.status).toBe(200);
    await ctl.exited;
    const counts = new Map(
      readFileSync(file, 'utf8')
        .trim()
        .split('\n')
        .map((line) => line.split(' ').map(Number) as [number, number]),
    );
    // Counted in agentctl itself (the agent may have its own line): present, and zero.
    expect(counts.get(ctl.child.pid!)).toBe(0);
  });
});
