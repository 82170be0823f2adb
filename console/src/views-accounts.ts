import { withQuery } from './api.js';
import { h, link, message, table, time } from './dom.js';
import { reconcileSummary } from './views-operations.js';
import { fetchAccounts, type View } from './view.js';

/**
 * Accounts (contract section 21): each account's endpoint, how many signing secrets it accepts,
 * what the relay holds of it (linking to its events and boxes), and its reconciliation.
 */
export function accountsView(): View {
  return {
    title: 'Accounts',
    async load() {
      const accounts = await fetchAccounts();
      if (accounts.length === 0) {
        return message('empty', 'No account has an endpoint: give BOXRELAY_SECRETS for the default account, or configure accounts (BOXRELAY_ACCOUNTS_FILE).');
      }
      const rows = accounts.map((account) => [
        account.name,
        h('code', null, `POST ${account.endpoint}`),
        account.secrets === 0 ? h('span', { class: 'badge bad', title: 'Every delivery to this endpoint is refused' }, 'none') : String(account.secrets),
        time(account.lastDeliveryAt),
        link(withQuery('#/events', { account: account.name }), String(account.events)),
        link(withQuery('#/boxes', { account: account.name }), String(account.boxes)),
        account.reconcile === null ? 'Not configured' : h('span', null, reconcileSummary(account.reconcile)),
      ]);
      return h(
        'div',
        null,
        table('Accounts', ['Account', 'Endpoint', 'Secrets', 'Last delivery', 'Events', 'Boxes', 'Reconciliation'], rows),
        h('p', { class: 'hint' }, 'Each account signs with its own secrets at its own endpoint; its events and boxes never mix with another account’s.'),
      );
    },
  };
}
