import { accountParam, type Item } from './api.js';

/**
 * Elements built with the DOM API only: text goes in as text nodes and attributes through
 * setAttribute, never as HTML, so a string from the upstream (a box name, event data) cannot
 * become markup.
 */
export type Child = Node | string | number | null | undefined | false | Child[];
type Prop = string | number | boolean | null | undefined | ((event: Event) => void);

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props?: Record<string, Prop> | null, ...children: Child[]): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(props ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.replace(/^on/, ''), value);
    else element.setAttribute(name, value === true ? '' : String(value));
  }
  append(element, children);
  return element;
}

export function append(parent: Node, children: Child[]): void {
  for (const child of children) {
    if (Array.isArray(child)) append(parent, child);
    else if (child instanceof Node) parent.appendChild(child);
    else if (child !== null && child !== undefined && child !== false) parent.appendChild(document.createTextNode(String(child)));
  }
}

/** An in-page address: always starts with `#/`, each part from data percent-encoded. */
export function route(...parts: string[]): string {
  return `#/${parts.map(encodeURIComponent).join('/')}`;
}

/** The in-page address of a box or event, its account in the query (left out for `default`). */
export function itemRoute(collection: 'boxes' | 'events', { id, account }: Item): string {
  const path = route(collection, id);
  const named = accountParam(account);
  return named === null ? path : `${path}?account=${encodeURIComponent(named)}`;
}

/** A link to a box or event, named by its id. */
export const itemLink = (collection: 'boxes' | 'events', item: Item): HTMLAnchorElement => link(itemRoute(collection, item), item.id);

export function link(href: string, ...children: Child[]): HTMLAnchorElement {
  return h('a', { href }, ...children);
}

/** A list as a table with column headers; it scrolls sideways inside its own box on narrow screens. */
export function table(label: string, headers: string[], rows: Child[][]): HTMLElement {
  return h(
    'div',
    { class: 'table-wrap', role: 'region', 'aria-label': label, tabindex: 0 },
    h(
      'table',
      null,
      h('caption', null, label),
      h('thead', null, h('tr', null, headers.map((title) => h('th', { scope: 'col' }, title)))),
      h('tbody', null, rows.map((cells) => h('tr', null, cells.map((cell) => h('td', null, cell))))),
    ),
  );
}

/** A timestamp in the viewer's zone, with the UTC value on hover. */
export function time(iso: string | null | undefined): Child {
  if (!iso) return '—';
  const at = new Date(iso);
  if (Number.isNaN(at.getTime())) return iso;
  const utc = at.toISOString();
  return h('time', { datetime: utc, title: `${utc} (UTC)` }, at.toLocaleString());
}

/** A labelled form field. */
export function field(label: string, input: HTMLElement): HTMLElement {
  const id = `f-${label.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input);
}

export function message(kind: 'empty' | 'error' | 'done', ...children: Child[]): HTMLElement {
  return h('p', { class: `message ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, ...children);
}
