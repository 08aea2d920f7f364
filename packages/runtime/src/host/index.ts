/*
 * `@kandev/runtime/host`: everything that depends on the host's kernel — /proc, process trees and
 * their termination, autogroups, cpu cgroups (v1 and v2), uids and capabilities, nice values — and
 * a typed description of what this host supports (ADR 0076). Imports only Node and
 * @opentelemetry/api (lint keeps it so): agentctl, the scripts and the benchmarks load it without
 * the service runtime's NATS, database and tracing SDK.
 */
export { lowerAutogroupPriority, type AutogroupOutcome } from './autogroup.js';
export { findCpuCgroup, makeCpuGroup, ownCpuCgroup, type CpuCgroup } from './cgroup.js';
export {
  Cap,
  hasEnded,
  holdsCaps,
  parseCapEff,
  parseChildren,
  parseCmdline,
  parseMachineBusyTicks,
  parseProcStat,
  parseSchedstatNs,
  statusIsZombie,
  statusUids,
  type ProcStat,
} from './parse.js';
export { niceBelowOwn, yieldPriorityTo } from './priority.js';
export {
  HAS_PROC,
  childProcesses,
  isAlive,
  listPids,
  liveStat,
  machineBusyTicks,
  mergeTrees,
  processRef,
  processTree,
  processesInGroups,
  readCmdline,
  readProcStat,
  threadsCpuNs,
  type ProcessRef,
  type TreeProcess,
} from './process-tree.js';
export { describeHost, hostSupport, probeHost, type HostSupport, type ProbeRoots } from './support.js';
export { POLL_MS, killRetryDelayMs, settledOrAfter, signalProcesses, terminate, type TerminateOptions, type TerminateResult } from './terminate.js';
export { liveUids, pidsByUid } from './uids.js';
