import { activity } from './stalls.js';

/**
 * Runs `run` every `intervalMs` (the first time one interval from now), each run after the last
 * one settled, until the returned function is called. A run in flight when it is called finishes,
 * but schedules no other: a service's background loops stop with it and never touch a connection
 * its shutdown has closed. A `name` records each run for the stall recorder (stalls.ts). `run` handles its own errors; one that escapes is passed to `onError`.
 */
export function repeatEvery(intervalMs: number, run: () => Promise<unknown>, onError: (e: unknown) => void, name?: string): () => void {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const tick = async () => {
    try {
      await (name ? activity(name, run) : run());
    } catch (e) {
      onError(e);
    }
    if (!stopped) timer = setTimeout(tick, intervalMs).unref();
  };
  timer = setTimeout(tick, intervalMs).unref();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
