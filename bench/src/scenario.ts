import type { NatsConnection } from '@nats-io/nats-core';
import type postgres from 'postgres';
import type { Stats } from './stats.js';

/** What every scenario gets: real servers of its own, the run's sizes, and cleanup. */
export interface BenchContext {
  /** 1-based round number; whole-stack scenarios run in round 1 only (they are slow and carry their own floors). */
  round: number;
  iterations: number;
  warmup: number;
  /** A nats-server -js started for this run. */
  natsUrl: string;
  /** A fresh, empty database on the test PostgreSQL server. */
  databaseUrl: string;
  /** A new NATS connection, closed after the scenario. */
  connect(name: string): Promise<NatsConnection>;
  /** A postgres.js pool on `databaseUrl` (max 1 connection by default), closed after the scenario. */
  sql(opts?: { max?: number }): postgres.Sql;
  /** Run after the scenario, newest first (stop services, drop tables...). */
  defer(fn: () => Promise<unknown> | unknown): void;
  log(message: string): void;
}

export interface ScenarioResult {
  /** Stable id, used in the result file (bench/results/floor.json) and as a baseline reference (`nats.request.bare`). */
  id: string;
  /** One line on what one iteration does. */
  label: string;
  stats: Stats;
  /** Id of the result this one is compared with (ratios of p50, p99, mean). */
  baseline?: string;
}

/**
 * A file under bench/src/scenarios/ whose default export is a Scenario joins the run; files run
 * in name order (hence the NN- prefixes). Later ones (cancel to agent, stop_task_kandev end to
 * end) start the services they need from `ctx` and return their own results.
 */
export interface Scenario {
  name: string;
  run(ctx: BenchContext): Promise<ScenarioResult[]>;
}
