import type { AuditTrail } from '../../audit-trail.js';
import { InvalidRequestError, NotFoundError } from '../../errors.js';
import { splitAccountKey } from '../../store/account-keys.js';
import { forgetBoxAudited, getBox, listBoxes, type Box } from '../../store/state/boxes.js';
import type { Database } from '../../store/engines/database.js';
import { methodNotAllowed } from '../send-error.js';
import { z } from 'zod';
import { ACCOUNT_FILTER, ACCOUNT_OF_ID, accountParam, keyOfId, type AdminAccounts } from './account-query.js';
import { okAnswer, pageAnswer, queryParam, reply, type AdminOperation } from './operation.js';
import { PAGE_QUERY, pageOf, queryText, readPage } from './pagination.js';
import { requester } from './requester.js';
import type { AdminRoutes } from './router.js';

const unknownBox = () => new NotFoundError('no such box');

/** A box (contract section 6) of an account (section 21). */
const box = z.strictObject({
  id: z.string().describe("The upstream's box id, unique within the account."),
  account: z.string().describe('The account the box is of (contract section 21).'),
  name: z.string().nullable(),
  state: z.string().nullable(),
  previousState: z.string().nullable(),
  stateChangedAt: z.string().nullable(),
  lastEventId: z.string().nullable().describe("The upstream's id of the box's last event, of the same account."),
  hydratedAt: z.string().nullable(),
});

/** A stored box as the admin API shows it: under its account, with the upstream's ids. */
const shownBox = (stored: Box): z.input<typeof box> => {
  const { account, id } = splitAccountKey(stored.id);
  return { ...stored, id, account, lastEventId: stored.lastEventId && splitAccountKey(stored.lastEventId).id };
};

const BOX_ID = { boxId: 'The box id (also given as `/admin/boxes/?id=<id>`, for an id a browser cannot put in a path).' };

export const listBoxesOperation = {
  method: 'get',
  path: '/boxes',
  summary: 'The last known state of each box, by id.',
  query: { state: queryParam('Only boxes in this state.'), q: queryParam('Only boxes whose id or name contains this text.'), ...ACCOUNT_FILTER, ...PAGE_QUERY },
  answers: { 200: pageAnswer('boxes', box) },
  errors: ['invalid_request'],
} as const satisfies AdminOperation;

export const getBoxOperation = {
  method: 'get',
  path: '/boxes/:boxId',
  summary: 'One box.',
  params: BOX_ID,
  query: ACCOUNT_OF_ID,
  answers: { 200: okAnswer({ box }) },
  errors: ['invalid_request', 'not_found'],
} as const satisfies AdminOperation;

export const forgetBoxOperation = {
  method: 'delete',
  path: '/boxes/:boxId',
  summary: 'Forgets a box (audited).',
  params: BOX_ID,
  query: ACCOUNT_OF_ID,
  answers: { 204: null },
  errors: ['invalid_request', 'not_found', 'storage_unavailable'],
} as const satisfies AdminOperation;

/** `/admin/boxes?state=&q=&account=`: the last known state of each box (contract section 7), and forgetting one. */
export function boxRoutes(database: Database, trail: AuditTrail, accounts: AdminAccounts): AdminRoutes {
  const { kysely } = database;
  return {
    operations: [listBoxesOperation, getBoxOperation, forgetBoxOperation],
    mount(router) {
      router.get(listBoxesOperation.path, async (req, res) => {
        const page = readPage(req);
        if (page.after !== undefined && typeof page.after !== 'string') {
          throw new InvalidRequestError('cursor is not one this server issued');
        }
        const rows = await listBoxes(kysely, {
          state: queryText(req, 'state'),
          search: queryText(req, 'q'),
          account: accountParam(req, accounts),
          bytewise: await accounts.bytewise(),
          afterId: page.after,
          limit: page.limit + 1,
        });
        const { items, nextCursor } = pageOf(rows, page, (box) => box.id);
        reply(res, listBoxesOperation, 200, { ok: true, boxes: items.map(shownBox), nextCursor });
      });
      router.get(getBoxOperation.path, async (req, res) => {
        const key = keyOfId(req, accounts, req.params.boxId as string);
        const box = key === undefined ? undefined : await getBox(kysely, key);
        if (!box) throw unknownBox();
        reply(res, getBoxOperation, 200, { ok: true, box: shownBox(box) });
      });
      router.delete(forgetBoxOperation.path, async (req, res) => {
        const boxId = req.params.boxId as string;
        const account = accountParam(req, accounts);
        const key = keyOfId(req, accounts, boxId);
        if (key === undefined) throw unknownBox();
        // The target is the stored key, which names the account beside `default`'s (`<name>:<id>`).
        await trail.record({ action: 'forget', target: key, by: requester(req), detail: account === undefined ? { boxId } : { boxId, account } }, async (audit) => {
          if (!(await forgetBoxAudited(database, key, audit))) throw unknownBox();
        });
        res.status(204).end();
      });
      router.all('/boxes', methodNotAllowed('GET'));
      router.all('/boxes/:boxId', methodNotAllowed('GET', 'DELETE'));
    },
  };
}
