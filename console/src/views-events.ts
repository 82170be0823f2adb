import { accountParam, api, ApiError, itemPath, withQuery, type CloudEvent, type Delivery, type Page, type TransformedBody } from './api.js';
import { field, h, itemLink, link, message, route, table, time } from './dom.js';
import { eventAttempts, resendButton } from './views-attempts.js';
import { withDeliveries } from './views-boxes.js';
import { accountIn, accountSelect, deliveryList, deliveryStatus, filterForm, isoToLocal, listOrEmpty, localToIso, pager, type View, type ViewContext } from './view.js';

/** Stored events, newest first, filtered by account, type, box and time. */
export function eventsView(context: ViewContext, query: URLSearchParams): View {
  const account = query.get('account');
  const type = query.get('type');
  const boxId = query.get('boxId');
  const since = query.get('since');
  const paging = pager(context);
  const accountInput = accountSelect(account, context);
  const typeInput = h('input', { type: 'text', value: type ?? '', placeholder: 'e.g. box.error', autocomplete: 'off' });
  const boxInput = h('input', { type: 'text', value: boxId ?? '', placeholder: 'bx_…', autocomplete: 'off' });
  const sinceInput = h('input', { type: 'datetime-local', value: isoToLocal(since) });
  return {
    title: 'Events',
    controls: filterForm('#/events', [field('Account', accountInput), field('Type', typeInput), field('Box id', boxInput), field('Received since', sinceInput)], () => ({
      account: accountInput.value,
      type: typeInput.value.trim(),
      boxId: boxInput.value.trim(),
      since: localToIso(sinceInput.value),
    })),
    async load() {
      const page = await api<{ events: CloudEvent[] } & Page>(
        'GET',
        withQuery('/admin/events', { account, type, boxId, since, limit: '20', cursor: paging.cursor() }),
      );
      const deliveries = await withDeliveries(page.events);
      const rows = page.events.map((event, i) => [
        time(event.receivedAt),
        event.account,
        event.type,
        event.subject ? itemLink('boxes', { id: event.subject, account: event.account }) : '—',
        itemLink('events', event),
        deliveryList(deliveries[i] ?? null),
      ]);
      const empty =
        account || type || boxId || since
          ? 'No event matches these filters. Widen them, or clear them to see every stored event.'
          : 'No events stored yet. They appear as the relay receives webhooks.';
      return listOrEmpty('Events', ['Received', 'Account', 'Type', 'Box', 'Event', 'Deliveries'], rows, page, paging, empty);
    },
  };
}

/** One event of an account: its deliveries to each sink (each resent by a button), its attempts, and the CloudEvent as sent. */
export function eventView(context: ViewContext, id: string, query: URLSearchParams): View {
  const item = { id, account: accountIn(query) };
  return {
    title: `Event ${id}`,
    async load() {
      let found: { event: CloudEvent; deliveries: Delivery[] };
      let bodies: TransformedBody[];
      try {
        [found, { bodies }] = await Promise.all([
          api<{ event: CloudEvent; deliveries: Delivery[] }>('GET', itemPath('events', item)),
          api<{ bodies: TransformedBody[] }>('GET', itemPath('events', item, '/bodies')),
        ]);
      } catch (error) {
        if (error instanceof ApiError && error.status === 404) {
          return message('empty', 'No such event is stored (it may be older than the retention window). ', link('#/events', 'Back to Events'));
        }
        throw error;
      }
      const { event, deliveries } = found;
      const attempts = await eventAttempts(item);
      return h(
        'div',
        null,
        h(
          'p',
          null,
          'Received ',
          time(event.receivedAt),
          ' by account ',
          link(withQuery('#/events', { account: item.account }), item.account),
          event.subject ? [' about box ', itemLink('boxes', { id: event.subject, account: item.account })] : null,
        ),
        h('h2', null, 'Deliveries'),
        deliveries.length === 0
          ? message('empty', 'It was routed to no sink.')
          : table(
              'Deliveries',
              ['Sink', 'Status', 'Attempts', 'Last error', 'Updated', 'Actions'],
              deliveries.map((d) => [link(route('sinks', d.sink), d.sink), deliveryStatus(d.status), d.attempts, d.lastError ?? '—', time(d.updatedAt), resendButton(context, item, d.sink)]),
            ),
        h('p', null, deliveries.some((d) => d.status === 'dead_lettered') ? link('#/dead-letters', 'Retry it under Dead letters') : null),
        h('p', null, 'See the ', link(withQuery('#/audit', { eventId: id, account: accountParam(item.account) }), 'operator changes to its dead letters'), '.'),
        h('h2', null, 'Attempts'),
        attempts,
        bodies.length === 0 ? null : [h('h2', null, 'Transformed bodies'), transformedBodies(bodies)],
        h('h2', null, 'CloudEvent'),
        h('pre', { class: 'json', tabindex: 0 }, JSON.stringify(event, null, 2)),
      );
    },
  };
}

/** What each hook's transform makes of the event, shown as text (never rendered), or why it fails. */
function transformedBodies(bodies: TransformedBody[]): HTMLElement {
  return table(
    'Transformed bodies',
    ['Hook', 'Content-Type', 'Body'],
    bodies.map((b) => [
      b.sink,
      b.contentType ?? '—',
      b.error
        ? h('span', { class: 'error' }, `${b.error.code}: ${b.error.message}`)
        : b.skipped
          ? 'Nothing: the transform gives null for this event (counted as skipped)'
          : h('pre', { class: 'json', tabindex: 0 }, prettyIfJson(b.body ?? '', b.contentType)),
    ]),
  );
}

const prettyIfJson = (body: string, contentType: string | null): string => {
  if (!contentType?.includes('json')) return body;
  try {
    return JSON.stringify(JSON.parse(body), null, 2);
  } catch {
    return body;
  }
};
