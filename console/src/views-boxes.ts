import { api, ApiError, auditKey, itemPath, withQuery, type Box, type CloudEvent, type Delivery, type Item, type Page } from './api.js';
import { field, h, itemLink, link, message, time } from './dom.js';
import { accountIn, accountSelect, deliveryList, filterForm, listOrEmpty, pager, type View, type ViewContext } from './view.js';

const BOX_PAGE = '50';
const EVENT_PAGE = '20';

/** Boxes by last known state, filtered by account and state and searched by id or name. */
export function boxesView(context: ViewContext, query: URLSearchParams): View {
  const account = query.get('account');
  const state = query.get('state');
  const search = query.get('q');
  const paging = pager(context);
  const accountInput = accountSelect(account, context);
  const stateInput = h('input', { type: 'text', value: state ?? '', placeholder: 'e.g. error', autocomplete: 'off' });
  const searchInput = h('input', { type: 'search', value: search ?? '', placeholder: 'bx_… or a name', autocomplete: 'off' });
  return {
    title: 'Boxes',
    controls: filterForm('#/boxes', [field('Account', accountInput), field('State', stateInput), field('Search id or name', searchInput)], () => ({
      account: accountInput.value,
      state: stateInput.value.trim(),
      q: searchInput.value.trim(),
    })),
    async load() {
      const page = await api<{ boxes: Box[] } & Page>(
        'GET',
        withQuery('/admin/boxes', { account, state, q: search, limit: BOX_PAGE, cursor: paging.cursor() }),
      );
      const rows = page.boxes.map((box) => [
        itemLink('boxes', box),
        box.account,
        box.name ?? '—',
        box.state ?? 'unknown',
        box.previousState ?? '—',
        time(box.stateChangedAt),
        box.lastEventId ? itemLink('events', { id: box.lastEventId, account: box.account }) : '—',
      ]);
      const empty =
        account || state || search
          ? 'No box matches these filters. Change them, or clear them to see every box.'
          : 'No boxes yet. A box appears once the relay receives its first event.';
      return listOrEmpty('Boxes', ['Id', 'Account', 'Name', 'State', 'Previous state', 'State changed', 'Last event'], rows, page, paging, empty);
    },
  };
}

/** Fetches each event's deliveries; an event pruned meanwhile shows none. */
export async function withDeliveries(events: CloudEvent[]): Promise<(Delivery[] | null)[]> {
  return Promise.all(
    events.map(async (event) => {
      try {
        return (await api<{ deliveries: Delivery[] }>('GET', itemPath('events', event))).deliveries;
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) return null;
        throw error;
      }
    }),
  );
}

/** One box of an account: its record, then its events newest first with each sink's delivery status. */
export function boxView(context: ViewContext, id: string, query: URLSearchParams): View {
  const item: Item = { id, account: accountIn(query) };
  const paging = pager(context);
  const auditLink = () => link(withQuery('#/audit', { target: auditKey(item) }), 'operator changes to this box');
  return {
    title: `Box ${id}`,
    async load() {
      let box: Box;
      try {
        box = (await api<{ box: Box }>('GET', itemPath('boxes', item))).box;
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) {
          return message('empty', 'The relay knows no such box (it may have been forgotten: ', auditLink(), '). ', link('#/boxes', 'Back to Boxes'));
        }
        throw error;
      }
      const page = await api<{ events: CloudEvent[] } & Page>(
        'GET',
        // The account given, `default` too: without it the box of this id in every account is listed.
        withQuery('/admin/events', { boxId: id, account: item.account, limit: EVENT_PAGE, cursor: paging.cursor() }),
      );
      const deliveries = await withDeliveries(page.events);
      const facts: [string, Node | string][] = [
        ['Account', link(withQuery('#/boxes', { account: item.account }), item.account)],
        ['Name', box.name ?? '—'],
        ['State', box.state ?? 'unknown'],
        ['Previous state', box.previousState ?? '—'],
        ['State changed', h('span', null, time(box.stateChangedAt))],
        ['Hydrated', h('span', null, time(box.hydratedAt))],
      ];
      return h(
        'div',
        null,
        h('dl', { class: 'facts' }, facts.map(([term, value]) => [h('dt', null, term), h('dd', null, value)])),
        h('p', null, 'See the ', auditLink(), '.'),
        h('h2', null, 'Events, newest first'),
        listOrEmpty(
          'Events of this box',
          ['Received', 'Type', 'Event', 'Deliveries'],
          page.events.map((event, i) => [time(event.receivedAt), event.type, itemLink('events', event), deliveryList(deliveries[i] ?? null)]),
          page,
          paging,
          'No events are stored for this box (older ones are pruned after the retention window).',
        ),
      );
    },
  };
}
