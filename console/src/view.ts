import { api, DEFAULT_ACCOUNT, withQuery, type AccountRow, type Delivery, type Page, type SinkRow } from './api.js';
import { h, message, table, type Child } from './dom.js';

/** One view: its filters (built once) and its data, loaded again on each refresh. */
export interface View {
  title: string;
  controls?: Node;
  load?(): Promise<Node>;
}

export interface ViewContext {
  /** Loads the data part again (after an action, or a page change). */
  reload(): void;
  /** Tells the outcome of an action in the status line. */
  notify(kind: 'done' | 'error', text: string): void;
  /** An error of an action: sign-in again for a refused token, otherwise in the status line. */
  fail(error: unknown): void;
}

/** A button's action: its outcome in the status line, then the data loaded again either way. */
export function action(context: ViewContext, run: () => Promise<string>): () => Promise<void> {
  return async () => {
    try {
      context.notify('done', await run());
    } catch (error) {
      context.fail(error);
    }
    context.reload();
  };
}

/**
 * Paging through a list with `cursor`/`nextCursor`: a stack of the cursors of the pages seen,
 * so "Previous page" goes back without the API paging backwards.
 */
export function pager(context: ViewContext) {
  const cursors: (string | null)[] = [null];
  return {
    cursor: (): string | null => cursors[cursors.length - 1] ?? null,
    controls(page: Page): HTMLElement {
      const next = page.nextCursor;
      return h(
        'div',
        { class: 'pager' },
        h('button', { type: 'button', disabled: cursors.length === 1, onclick: () => (cursors.pop(), context.reload()) }, 'Previous page'),
        h('span', null, `Page ${cursors.length}`),
        h('button', { type: 'button', disabled: next === null, onclick: () => next !== null && (cursors.push(next), context.reload()) }, 'Next page'),
      );
    },
  };
}

/** A list page with its pager, or what to do when it is empty. */
export function listOrEmpty(label: string, headers: string[], rows: Child[][], page: Page, paging: ReturnType<typeof pager>, empty: string): Node {
  if (rows.length === 0 && paging.cursor() === null) return message('empty', empty);
  return h('div', null, table(label, headers, rows), paging.controls(page));
}

/** Shown as the admin API names it (contract section 6), so what the console says can be searched for in the API. */
export function deliveryStatus(status: Delivery['status']): HTMLElement {
  return h('span', { class: `badge status-${status}` }, status);
}

/** Each sink's status for one event, in one table cell. */
export function deliveryList(deliveries: Delivery[] | null): Child {
  if (deliveries === null) return '—';
  if (deliveries.length === 0) return 'no sink';
  return h('ul', { class: 'deliveries' }, deliveries.map((d) => h('li', null, `${d.sink}: `, deliveryStatus(d.status))));
}

export const fetchSinks = async (): Promise<SinkRow[]> => (await api<{ sinks: SinkRow[] }>('GET', '/admin/sinks')).sinks;

/** A chooser of names ("All …" first), filled once they arrive; the one asked for stays a choice even when they leave it out. */
function namesSelect(all: string, names: Promise<string[]>, selected: string | null, context: ViewContext): HTMLSelectElement {
  const select = h('select', null, h('option', { value: '' }, all));
  names.then(
    (found) => {
      if (selected && !found.includes(selected)) found.push(selected);
      for (const name of found) select.append(h('option', { value: name, selected: name === selected }, name));
    },
    (error: unknown) => context.fail(error),
  );
  return select;
}

/** A sink chooser ("All sinks" first). */
export const sinkSelect = (selected: string | null, context: ViewContext): HTMLSelectElement =>
  namesSelect('All sinks', fetchSinks().then((sinks) => sinks.map((sink) => sink.name)), selected, context);

export const fetchAccounts = async (): Promise<AccountRow[]> => (await api<{ accounts: AccountRow[] }>('GET', '/admin/accounts')).accounts;

/** An account chooser ("All accounts" first); `default` without a secret is not listed, but its earlier events are still there to choose. */
export const accountSelect = (selected: string | null, context: ViewContext): HTMLSelectElement =>
  namesSelect('All accounts', fetchAccounts().then((accounts) => accounts.map((account) => account.name)), selected, context);

/** The account a view of one box or event is of: `?account=`, else `default`. */
export const accountIn = (query: URLSearchParams): string => query.get('account') || DEFAULT_ACCOUNT;

/** `datetime-local` input value (viewer's zone) to ISO 8601 UTC, and back. */
export function localToIso(value: string): string | null {
  const at = new Date(value);
  return value === '' || Number.isNaN(at.getTime()) ? null : at.toISOString();
}

export function isoToLocal(iso: string | null): string {
  if (!iso) return '';
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return '';
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

/** A filter form whose values become the view's address (so a filtered list can be linked). */
export function filterForm(base: string, fields: HTMLElement[], values: () => Record<string, string | null>): HTMLFormElement {
  return h(
    'form',
    {
      class: 'filters',
      onsubmit: (event) => {
        event.preventDefault();
        location.hash = withQuery(base, values());
      },
    },
    fields,
    h('button', { type: 'submit' }, 'Filter'),
    h('a', { href: base, class: 'clear' }, 'Clear filters'),
  );
}
