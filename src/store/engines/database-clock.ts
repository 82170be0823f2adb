import { sql, type RawBuilder } from 'kysely';
import type { Database } from './database.js';

/**
 * The time a lease shared by replicas is compared with (contract section 9). On PostgreSQL that is
 * the database's clock, read inside the statement, so replicas whose own clocks disagree still agree
 * on who holds what; on SQLite one process serves the file, so its (injected) clock is the only one.
 */
export type LeaseNow = (now: number) => RawBuilder<number>;

/** The PostgreSQL server's clock in epoch ms, read as the statement runs. */
const POSTGRES_NOW_MS = sql<number>`(floor(extract(epoch from clock_timestamp()) * 1000))::bigint`;

export function leaseClock(database: Pick<Database, 'dialect'>): LeaseNow {
  return database.dialect === 'postgres' ? () => POSTGRES_NOW_MS : (now) => sql<number>`${now}`;
}
