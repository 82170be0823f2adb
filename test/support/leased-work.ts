import { hostname } from 'node:os';
import type pg from 'pg';
import type { RelayProcess } from './process.js';

/** A lease by the database's clock still runs. */
const LIVE = `lease_until > (extract(epoch from clock_timestamp()) * 1000)`;

/**
 * What a relay process holds on PostgreSQL (lease owners are `host:pid:random`): pending outbox rows
 * under its lease, and the routed events past the cursors of the log partitions it leases (what it
 * may have sent without its cursor's move stored). `live`: only leases that have not run out.
 */
export async function leasedWork(db: pg.Client, relay: RelayProcess, { live = false } = {}): Promise<{ delivery_id: string; sink: string }[]> {
  const owner = `${hostname()}:${relay.child.pid}:%`;
  const { rows } = await db.query<{ delivery_id: string; sink: string }>(
    `SELECT delivery_id, sink FROM outbox WHERE status = 'pending' AND lease_owner LIKE $1 ${live ? `AND ${LIVE}` : ''}
     UNION ALL
     SELECT d.id AS delivery_id, c.sink FROM log_cursors c JOIN deliveries d ON d.part = c.part
     WHERE c.lease_owner LIKE $1 ${live ? `AND c.${LIVE}` : ''} AND d.seq > c.seq
       AND (',' || d.sinks || ',') LIKE ('%,' || c.sink || ',%')
       AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = c.sink)`,
    [owner],
  );
  return rows;
}

/** Nothing left to do on the database: no routed event past a cursor, no outbox row but delivered ones. */
export async function allSettled(db: pg.Client): Promise<boolean> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT (SELECT count(*) FROM outbox WHERE status <> 'delivered')
       + (SELECT count(*) FROM log_cursors c JOIN deliveries d ON d.part = c.part
          WHERE (d.seq IS NULL OR d.seq > c.seq) AND (',' || d.sinks || ',') LIKE ('%,' || c.sink || ',%')
            AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = c.sink))::int AS n`,
  );
  return Number(rows[0]?.n) === 0;
}
