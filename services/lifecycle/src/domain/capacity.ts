/**
 * the default cap on executions one lifecycle instance holds (MAX_EXECUTIONS), from the
 * memory it may use: three quarters of it (the rest for agentctl's own service, the page cache and
 * the control plane beside it) over a budget of 128 MiB per execution (agentctl plus an agent:
 * about 120 MiB measured for one of thirty children, issue 55), at least 1. The memory is the
 * cgroup's limit when one applies (a pod), else the host's.
 */
export const EXECUTION_MEMORY_BYTES = 128 * 1024 * 1024;
export const MEMORY_SHARE = 0.75;

export function defaultMaxExecutions(memoryBytes: number): number {
  return Math.max(1, Math.floor((memoryBytes * MEMORY_SHARE) / EXECUTION_MEMORY_BYTES));
}

/** The memory this process may use: the cgroup limit when it is set and below the host's memory. */
export function usableMemory(total: number, constrained: number | undefined): number {
  return constrained && constrained > 0 && constrained < total ? constrained : total;
}
