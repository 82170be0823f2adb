import { api, ApiError, itemPath, withQuery, type Box, type CloudEvent, type Delivery, type Page } from './api.js';
import { field, h, link, message, route, time } from './dom.js';
import { deliveryList, filterForm, listOrEmpty, pager, type View, type ViewContext } from './view.js';

const BOX_PAGE = '50';
const EVENT_PAGE = '20';

/** Boxes by last known state, filtered by state and searched by id or name. */
export function boxesView(context: ViewContext, query: URLSearchParams): View {
  const state = query.get('state');
  const search = query.get('q');
  const paging = pager(context);
  const stateInput = h('input', { type: 'text', value: state ?? '', placeholder: 'e.g. error', autocomplete: 'off' });
  const searchInput = h('input', { type: 'search', value: search ?? '', placeholder: 'bx_… or a name', autocomplete: 'off' });
  return {
    title: 'Boxes',
    controls: filterForm('#/boxes', [field('State', stateInput), field('Search id or name', searchInput)], () => ({
      state: stateInput.value.trim(),
      q: searchInput.value.trim(),
    })),
    async load() {
      const page = await api<{ boxes: Box[] } & Page>(
        'GET',
        withQuery('/admin/boxes', { state, q: search, limit: BOX_PAGE, cursor: paging.cursor() }),
      );
      const rows = page.boxes.map((box) => [
        link(route('boxes', box.id), box.id),
        box.name ?? '—',
        box.state ?? 'unknown',
        box.previousState ?? '—',
        time(box.stateChangedAt),
        box.lastEventId ? link(route('events', box.lastEventId), box.lastEventId) : '—',
      ]);
      const empty =
        state || search
          ? 'No box matches these filters. Change them, or clear them to see every box.'
          : 'No boxes yet. A box appears once the relay receives its first event.';
      return listOrEmpty('Boxes', ['Id', 'Name', 'State', 'Previous state', 'State changed', 'Last event'], rows, page, paging, empty);
    },
  };
}

/** Fetches each event's deliveries; an event pruned meanwhile shows none. */
export async function withDeliveries(events: CloudEvent[]): Promise<(Delivery[] | null)[]> {
  return Promise.all(
    events.map(async (event) => {
      try {
        return (await api<{ deliveries: Delivery[] }>('GET', itemPath('events', event.id))).deliveries;
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) return null;
        throw error;
      }
    }),
  );
}

/** One box: its record, then its events newest first with each sink's delivery status. */
export function boxView(context: ViewContext, id: string): View {
  const paging = pager(context);
  const auditLink = () => link(withQuery('#/audit', { target: id }), 'operator changes to this box');
  return {
    title: `Box ${id}`,
    async load() {
      let box: Box;
      try {
        box = (await api<{ box: Box }>('GET', itemPath('boxes', id))).box;
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) {
          return message('empty', 'The relay knows no such box (it may have been forgotten: ', auditLink(), '). ', link('#/boxes', 'Back to Boxes'));
        }
        throw error;
      }
      const page = await api<{ events: CloudEvent[] } & Page>(
        'GET',
        withQuery('/admin/events', { boxId: id, limit: EVENT_PAGE, cursor: paging.cursor() }),
      );
      const deliveries = await withDeliveries(page.events);
      const facts: [string, Node | string][] = [
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
          page.events.map((event, i) => [time(event.receivedAt), event.type, link(route('events', event.id), event.id), deliveryList(deliveries[i] ?? null)]),
          page,
          paging,
          'No events are stored for this box (older ones are pruned after the retention window).',
        ),
      );
    },
  };
}
