import { accountParam, api, itemOfAuditKey, withQuery, type Page } from './api.js';
import { field, h, itemLink, itemRoute, link, time, type Child } from './dom.js';
import { accountIn, filterForm, listOrEmpty, pager, type View, type ViewContext } from './view.js';

export interface AuditEntry {
  id: number;
  at: string;
  action: string;
  target: string | null;
  by: string;
  detail: Record<string, unknown>;
}

/** The actions the admin API records (AUDIT_ACTIONS in src/store/state/audit.ts). */
const ACTIONS = ['retry', 'discard', 'retry_all', 'replay', 'pause', 'resume', 'forget', 'reconcile', 'resend'];

/** Where a target lives in the console: a box, a sink, an event; a dead letter's id has no view of its own. */
function targetCell(entry: AuditEntry): Child {
  if (entry.target === null) return 'every sink';
  // A box or event of an account other than `default` is named `<account>:<id>`.
  if (entry.action === 'forget') return link(itemRoute('boxes', itemOfAuditKey(entry.target)), entry.target);
  if (entry.action === 'resend') return link(itemRoute('events', itemOfAuditKey(entry.target)), entry.target);
  if (['pause', 'resume', 'replay', 'retry_all'].includes(entry.action)) return link('#/sinks', entry.target);
  return `dead letter ${entry.target}`;
}

/** Audit: every change operators made (admin API or CLI), newest first; filter by action, target or event. */
export function auditView(context: ViewContext, query: URLSearchParams): View {
  const paging = pager(context);
  const action = h('select', null, h('option', { value: '' }, 'Any action'), ACTIONS.map((a) => h('option', { value: a, selected: a === query.get('action') }, a)));
  const target = h('input', { type: 'search', value: query.get('target') ?? '', placeholder: 'box id, sink or dead letter id', spellcheck: 'false' });
  const eventId = query.get('eventId');
  const account = accountIn(query);
  const filters = { action: query.get('action'), target: query.get('target'), eventId, account: eventId ? accountParam(account) : null };
  return {
    title: 'Audit',
    controls: h(
      'div',
      null,
      filterForm('#/audit', [field('Action', action), field('Target', target)], () => ({ action: action.value, target: target.value.trim() })),
      eventId ? h('p', { class: 'hint' }, 'Retries and discards of the dead letters of event ', itemLink('events', { id: eventId, account }), ` (account ${account}).`) : null,
    ),
    async load() {
      const page = await api<{ audit: AuditEntry[] } & Page>('GET', withQuery('/admin/audit', { ...filters, limit: '50', cursor: paging.cursor() }));
      const rows = page.audit.map((entry) => [time(entry.at), entry.action, targetCell(entry), entry.by, h('code', null, JSON.stringify(entry.detail))]);
      return listOrEmpty('Audit entries', ['When', 'Action', 'Target', 'By', 'Parameters'], rows, page, paging, 'No operator change recorded (for these filters).');
    },
  };
}
