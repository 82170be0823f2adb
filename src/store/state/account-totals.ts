import { sql, type Kysely } from 'kysely';
import { ofAccount } from '../account-keys.js';
import type { Schema } from '../schema.js';

/** What the store holds of one account (contract section 21, `GET /admin/accounts`). */
export interface AccountTotals {
  /** Events stored under the account's keys. */
  events: number;
  boxes: number;
  /** Epoch ms at which the newest of its box events was stored; null when none is. */
  lastDeliveryAt: number | null;
}

/**
 * Counts one account's rows by their keys, each a read of an index only: a named account's a range
 * of it where text sorts bytewise (`ofAccount`), `default`'s (keys without a prefix) all of it. The
 * newest event comes from the box index, which holds the time beside each key: every upstream
 * lifecycle event names a box, and the relay's own operator events name none, so they count as no
 * account's delivery.
 */
export async function accountTotals(kysely: Kysely<Schema>, account: string, bytewise: boolean): Promise<AccountTotals> {
  const [events, boxes, newest] = await Promise.all([
    kysely.selectFrom('deliveries').select((eb) => eb.fn.countAll<number>().as('n')).where(ofAccount('id', account, bytewise)).executeTakeFirstOrThrow(),
    kysely.selectFrom('boxes').select((eb) => eb.fn.countAll<number>().as('n')).where(ofAccount('id', account, bytewise)).executeTakeFirstOrThrow(),
    // `+ 0`: not the receipt time's own index, walked from its end with a row read each until a key
    // matches, which for an account silent for long reads every row stored since.
    kysely
      .selectFrom('deliveries')
      .select(sql<number | null>`max(${sql.ref('received_at')} + 0)`.as('at'))
      .where(ofAccount('box_id', account, bytewise))
      .executeTakeFirstOrThrow(),
  ]);
  return { events: Number(events.n), boxes: Number(boxes.n), lastDeliveryAt: newest.at == null ? null : Number(newest.at) };
}
