import type { Kysely } from 'kysely';
import type { Schema } from '../schema.js';

/**
 * The highest failure threshold announced for each sink since its failures last fell away (contract
 * section 22, `boxrelay.sink.degraded`), shared by the replicas: a `relay_meta` row per sink while
 * one is announced, none once it is re-armed. A fact of the database beside the others there, so
 * no table of its own; a store copy leaves it behind, which at worst announces a threshold again.
 */
export interface DegradedMarks {
  /** The marks of `sinks` (a sink without one is missing). */
  read(sinks: readonly string[]): Promise<Map<string, number>>;
  /**
   * Moves a sink's mark from `from` to `to` (0: none), only if it still reads `from`: one statement,
   * so of replicas that judged the same change one makes it. True when this call made it.
   */
  move(sink: string, from: number, to: number): Promise<boolean>;
}

const PREFIX = 'sink_degraded:';
const nameOf = (sink: string) => `${PREFIX}${sink}`;

export function createDegradedMarks(db: Kysely<Schema>): DegradedMarks {
  return {
    async read(sinks) {
      if (sinks.length === 0) return new Map();
      const rows = await db.selectFrom('relay_meta').select(['name', 'value']).where('name', 'in', sinks.map(nameOf)).execute();
      return new Map(rows.map((row) => [row.name.slice(PREFIX.length), Number(row.value)]));
    },

    async move(sink, from, to) {
      if (from === to) return false;
      const name = nameOf(sink);
      if (from === 0) {
        const inserted = await db.insertInto('relay_meta').values({ name, value: String(to) }).onConflict((oc) => oc.column('name').doNothing()).returning('name').executeTakeFirst();
        return inserted !== undefined;
      }
      if (to === 0) {
        const deleted = await db.deleteFrom('relay_meta').where('name', '=', name).where('value', '=', String(from)).executeTakeFirst();
        return deleted.numDeletedRows > 0n;
      }
      const updated = await db.updateTable('relay_meta').set({ value: String(to) }).where('name', '=', name).where('value', '=', String(from)).executeTakeFirst();
      return updated.numUpdatedRows > 0n;
    },
  };
}
