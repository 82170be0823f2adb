import { api, ApiError, session } from './api.js';
import { field, h, link, message } from './dom.js';
import { accountsView } from './views-accounts.js';
import { auditView } from './views-audit.js';
import { boxesView, boxView } from './views-boxes.js';
import { eventsView, eventView } from './views-events.js';
import { sinkView } from './views-attempts.js';
import { deadLettersView, overviewView, replayView, sinksView } from './views-operations.js';
import type { View, ViewContext } from './view.js';

/** The contract's bound: data is fetched again at most every 5 s, and not while the tab is hidden. */
const REFRESH_MS = 5000;

const root = document.getElementById('app') as HTMLElement;
const NAV: [string, string][] = [
  ['#/', 'Overview'],
  ['#/boxes', 'Boxes'],
  ['#/events', 'Events'],
  ['#/dead-letters', 'Dead letters'],
  ['#/replay', 'Replay'],
  ['#/sinks', 'Sinks'],
  ['#/accounts', 'Accounts'],
  ['#/audit', 'Audit'],
];

let leaveView = (): void => {};

/** `#/boxes/bx_1?account=prod` → ['boxes', 'bx_1'] and its query; null for an address that cannot be read. */
function address(): { parts: string[]; query: URLSearchParams } | null {
  const raw = location.hash.replace(/^#\/?/, '');
  const mark = raw.indexOf('?');
  try {
    const parts = (mark === -1 ? raw : raw.slice(0, mark)).split('/').filter(Boolean).map(decodeURIComponent);
    return { parts, query: new URLSearchParams(mark === -1 ? '' : raw.slice(mark + 1)) };
  } catch {
    return null;
  }
}

function viewAt(context: ViewContext): { view: View; section: string } | null {
  const at = address();
  if (!at) return null;
  const [first = '', id, ...rest] = at.parts;
  if (rest.length > 0) return null;
  if (id !== undefined) {
    if (first === 'boxes') return { view: boxView(context, id, at.query), section: '#/boxes' };
    if (first === 'events') return { view: eventView(context, id, at.query), section: '#/events' };
    if (first === 'sinks') return { view: sinkView(context, id, at.query), section: '#/sinks' };
    return null;
  }
  const views: Record<string, () => View> = {
    '': () => overviewView(at.query),
    boxes: () => boxesView(context, at.query),
    events: () => eventsView(context, at.query),
    'dead-letters': () => deadLettersView(context, at.query),
    replay: () => replayView(context),
    sinks: () => sinksView(context),
    accounts: () => accountsView(),
    audit: () => auditView(context, at.query),
  };
  const make = views[first];
  return make ? { view: make(), section: `#/${first}` } : null;
}

function signOut(note?: string): void {
  session.signOut();
  showSignIn(note);
}

function showSignIn(note?: string): void {
  leaveView();
  const input = h('input', { type: 'password', required: true, autocomplete: 'off', spellcheck: 'false' });
  const feedback = h('div', null, note ? message('error', note) : null);
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    {
      class: 'sign-in',
      onsubmit: async (event) => {
        event.preventDefault();
        button.disabled = true;
        try {
          // Checked before it is kept, so a wrong token never lands in storage.
          await api('GET', '/admin/sinks', undefined, input.value);
          session.signIn(input.value);
          showView();
        } catch (error) {
          feedback.replaceChildren(
            error instanceof ApiError && error.status === 401
              ? message('error', 'That token was refused. Enter the value of BOXRELAY_ADMIN_TOKEN of this relay.')
              : message('error', `The relay could not be reached (${(error as Error).message}). Check that it runs, then sign in again.`),
          );
          input.select();
        } finally {
          button.disabled = false;
        }
      },
    },
    h('h1', null, 'boxrelay console'),
    field('Admin token', input),
    button,
    feedback,
  );
  root.replaceChildren(h('main', { class: 'sign-in-page' }, form));
  input.focus();
}

function showView(): void {
  leaveView();
  if (session.token() === null) return showSignIn();
  const status = h('div', { class: 'status', 'aria-live': 'polite' });
  const data = h('div', { class: 'data' });
  let loading = false;
  let left = false;
  const showError = (error: unknown, where: HTMLElement) => {
    if (error instanceof ApiError && error.status === 401) return signOut('The admin token was refused (it may have changed). Sign in again.');
    where.replaceChildren(
      message('error', `Could not load this view: ${(error as Error).message}. The relay may be down or restarting; this page tries again every 5 seconds.`),
    );
  };
  const context: ViewContext = {
    reload: () => void load(),
    notify: (kind, text) => status.replaceChildren(message(kind, text)),
    fail: (error) => showError(error, status),
  };
  const found = viewAt(context);
  const view: View = found?.view ?? {
    title: 'Not found',
    controls: message('empty', 'There is no such view. ', link('#/', 'Go to the overview')),
  };
  const load = async () => {
    if (!view.load || loading) return;
    loading = true;
    try {
      const node = await view.load();
      if (!left) data.replaceChildren(node);
    } catch (error) {
      if (!left) showError(error, data);
    } finally {
      loading = false;
    }
  };
  const heading = h('h1', { tabindex: -1 }, view.title);
  root.replaceChildren(
    h(
      'header',
      null,
      h('span', { class: 'brand' }, 'boxrelay'),
      h(
        'nav',
        { 'aria-label': 'Views' },
        h('ul', null, NAV.map(([href, label]) => h('li', null, h('a', { href, 'aria-current': found?.section === href ? 'page' : null }, label)))),
      ),
      h('button', { type: 'button', class: 'sign-out', onclick: () => signOut() }, 'Sign out'),
    ),
    h('main', null, heading, view.controls ?? null, status, data),
  );
  heading.focus();
  void load();
  // Not while the tab is hidden, nor while the keyboard is inside the list (a refresh would lose its place).
  const timer = setInterval(() => {
    if (!document.hidden && !data.contains(document.activeElement)) void load();
  }, REFRESH_MS);
  leaveView = () => {
    left = true;
    clearInterval(timer);
    leaveView = () => {};
  };
}

window.addEventListener('hashchange', showView);
showView();
