import { z } from 'zod';
import { endpointOf } from '../../config/default-account.js';
import type { Database } from '../../store/engines/database.js';
import { accountTotals } from '../../store/state/account-totals.js';
import type { Run } from '../../store/state/reconcile-runs.js';
import { methodNotAllowed } from '../send-error.js';
import { isoTime, okAnswer, reply, type AdminOperation } from './operation.js';
import { reconcileState } from './reconcile.js';
import type { AdminRoutes } from './router.js';

export const listAccountsOperation = {
  method: 'get',
  path: '/accounts',
  summary: 'Each account (contract section 21): its endpoint, how many secrets it accepts, what the store holds of it, and its reconciliation.',
  answers: {
    200: okAnswer({
      accounts: z.array(
        z.strictObject({
          name: z.string(),
          endpoint: z.string().describe('The path its deliveries are posted to: `/webhooks` for `default`, `/webhooks/<name>` for the others.'),
          secrets: z.number().int().describe('How many signing secrets it accepts now (never their values).'),
          lastDeliveryAt: isoTime().nullable().describe('When the newest of its events was stored (a webhook’s, or one a reconciliation run took); null when none is.'),
          events: z.number().int().describe('Events stored under the account.'),
          boxes: z.number().int().describe('Boxes whose state the relay keeps for the account.'),
          reconcile: reconcileState.nullable().describe('As in `GET /admin/reconcile`; null when the account has no API credentials.'),
        }),
      ),
    }),
  },
  errors: [],
} as const satisfies AdminOperation;

export interface AccountsRoutesDeps {
  database: Database;
  /** Whether the database sorts text bytewise (`AdminAccounts.bytewise`, asked once for every admin route). */
  bytewise(): Promise<boolean>;
  /** The accounts listed, in order, with the signing secrets each accepts now (`default` while its endpoint is served: it has one, or no further account is configured). */
  accounts(): { name: string; secrets: number }[];
  /** An account's reconciliation state; null when it has no API credentials. */
  reconcile(name: string): Promise<{ running: boolean; last: Run | null }> | null;
}

/** `GET /admin/accounts` (contract section 21): `{"ok":true,"accounts":[{name, endpoint, secrets, lastDeliveryAt, events, boxes, reconcile}]}`. */
export function accountsRoutes({ database, bytewise, accounts, reconcile }: AccountsRoutesDeps): AdminRoutes {
  return {
    operations: [listAccountsOperation],
    mount(router) {
      router.get(listAccountsOperation.path, async (_req, res) => {
        const byteOrder = await bytewise();
        const listed = await Promise.all(
          accounts().map(async ({ name, secrets }) => {
            const [totals, state] = await Promise.all([accountTotals(database.kysely, name, byteOrder), reconcile(name)]);
            return {
              name,
              endpoint: endpointOf(name),
              secrets,
              lastDeliveryAt: totals.lastDeliveryAt === null ? null : new Date(totals.lastDeliveryAt).toISOString(),
              events: totals.events,
              boxes: totals.boxes,
              reconcile: state,
            };
          }),
        );
        reply(res, listAccountsOperation, 200, { ok: true, accounts: listed });
      });
      router.all(listAccountsOperation.path, methodNotAllowed('GET'));
    },
  };
}
