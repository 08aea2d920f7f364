import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { startAgentStack, workerAgentUidRange, type StackService } from '@kandev/testkit';

/** What a file needs to drive the shared stack: its addresses, keys and processes (serializable). */
export interface SharedStackInfo {
  gatewayUrl: string;
  wsUrl: string;
  mcpUrl: string;
  dbUrl: string;
  stateDir: string;
  operatorKey: string;
  agentKey: string;
  eventsFile: string;
  /** The services' log lines (the stacks' level: warn and above), `[service] line` each: what a failing test reports (failure-logs.ts). */
  logFile: string;
  pids: Record<StackService, number>;
}

declare module 'vitest' {
  export interface ProvidedContext {
    sharedStack: SharedStackInfo;
  }
}

/** The settings of every e2e world unless a file says otherwise: a short teardown grace. */
export const WORLD_ENV: NodeJS.ProcessEnv = { TEARDOWN_GRACE_MS: '500' };

/**
 * One stack for the e2e files that run with the default settings and leave the stack as they found
 * it (no replica added, no service killed or restarted, no setting changed): they attach to it with
 * `sharedWorld()` instead of each starting and stopping five services, a nats-server and a database
 * (about 2 s a file, docs/testing.md). It lives in vitest's main process for the whole run.
 */
export default async function setup(project: TestProject) {
  // A uid slice apart from the worker's own stacks (this run's pool 2; the files run in pool 1).
  const uids = workerAgentUidRange({ VITEST_POOL_ID: '2' }, process.pid);
  // Into the stack's state directory (removed with it) once that exists; what comes before, after it.
  let early: string[] | null = [];
  let logFile = '';
  const w = await startAgentStack(
    { ...WORLD_ENV, ...(uids ? { AGENT_UID_RANGE: uids } : {}) },
    {
      onLog: (name, line) => {
        if (early) early.push(`[${name}] ${line}\n`);
        else appendFileSync(logFile, `[${name}] ${line}\n`);
      },
    },
  );
  logFile = join(w.stack.stateDir, 'services.log');
  writeFileSync(logFile, early.join(''));
  early = null;
  const pids = Object.fromEntries([...w.stack.services].map(([name, p]) => [name, p.pid])) as Record<StackService, number>;
  project.provide('sharedStack', {
    gatewayUrl: w.stack.gatewayUrl,
    wsUrl: w.stack.wsUrl,
    mcpUrl: w.stack.mcpUrl,
    dbUrl: w.stack.db.url,
    stateDir: w.stack.stateDir,
    operatorKey: w.stack.operatorKey,
    agentKey: w.stack.agentKey,
    eventsFile: w.eventsFile,
    logFile,
    pids,
  });
  return () => w.stop();
}
