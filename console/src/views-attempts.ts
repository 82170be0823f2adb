import { api, itemPath, sinkPath, withQuery, type Attempt, type AttemptMinute, type Item, type Page, type SinkHealth } from './api.js';
import { chartWidth, linesChart } from './charts.js';
import { field, h, itemLink, link, message, route, table, time, type Child } from './dom.js';
import { action, pager, type View, type ViewContext } from './view.js';

/** An attempt's outcome as the admin API names it. */
const outcomeBadge = (outcome: Attempt['outcome']): HTMLElement =>
  h('span', { class: `badge status-${outcome === 'retried' ? 'pending' : outcome}` }, outcome);

const errorText = (error: Attempt['error']): string => (error ? `${error.code}: ${error.message}` : '—');

/** Headers as a two-column table (names and values as text). */
const headerTable = (label: string, headers: Record<string, string>): Node =>
  table(label, ['Header', 'Value'], Object.entries(headers).map(([name, value]) => [name, value]));

/**
 * One attempt opened: what was sent and what came back. The body is a text node in a `pre`: a
 * receiver's answer (often HTML) is shown, never rendered.
 */
function attemptDetail(attempt: Attempt): HTMLElement {
  const title = `Attempt ${attempt.n} to ${attempt.sink}`;
  const { request, response } = attempt;
  return h(
    'section',
    { class: 'attempt', 'aria-label': title },
    h('h3', null, title),
    h('p', null, 'Started ', time(attempt.at), `, took ${attempt.durationMs} ms: `, outcomeBadge(attempt.outcome), attempt.status === null ? '' : ` HTTP ${attempt.status}`, attempt.error ? ` (${errorText(attempt.error)})` : ''),
    request ? [h('h4', null, 'Request'), h('p', null, 'POST ', h('code', null, request.url)), headerTable('Request headers', request.headers)] : h('p', null, 'A bus publish: no HTTP request.'),
    response
      ? [
          h('h4', null, 'Response'),
          headerTable('Response headers', response.headers),
          h('h4', null, response.bodyTruncated ? 'Body (its first 4096 bytes)' : 'Body'),
          response.body === '' ? message('empty', 'Empty.') : h('pre', { class: 'json response-body', 'aria-label': 'Response body', tabindex: 0 }, response.body),
        ]
      : request
        ? h('p', null, 'No response came (a timeout or a refused connection).')
        : null,
  );
}

/** Attempts as a table with a button per row that opens one in `panel`. */
function attemptTable(label: string, attempts: (Attempt & { eventId?: string; account?: string })[], panel: HTMLElement, withEvent: boolean): Node {
  return table(
    label,
    [...(withEvent ? ['Event', 'Account'] : ['Sink']), '#', 'Time', 'Duration', 'Outcome', 'Status', 'Error', ''],
    attempts.map((a) => [
      ...(withEvent && a.eventId !== undefined && a.account !== undefined ? [itemLink('events', { id: a.eventId, account: a.account }), a.account] : [a.sink]),
      String(a.n),
      time(a.at),
      `${a.durationMs} ms`,
      outcomeBadge(a.outcome),
      a.status === null ? '—' : String(a.status),
      errorText(a.error),
      h('button', { type: 'button', title: `Open attempt ${a.n} to ${a.sink}`, onclick: () => panel.replaceChildren(attemptDetail(a)) }, 'Open'),
    ]),
  );
}

/** The event view's attempts, newest first, one opened below the list. */
export async function eventAttempts(event: Item): Promise<Node> {
  const { attempts } = await api<{ attempts: Attempt[] } & Page>('GET', withQuery(itemPath('events', event, '/attempts'), { limit: '200' }));
  if (attempts.length === 0) return message('empty', 'No attempt recorded (yet, or attempts are not recorded: BOXRELAY_ATTEMPTS).');
  const panel = h('div', { class: 'attempt-panel' });
  return h('div', null, attemptTable('Attempts', attempts, panel, false), panel);
}

/** "Resend" for one sink of an event. */
export function resendButton(context: ViewContext, event: Item, sink: string): HTMLElement {
  return h(
    'button',
    {
      type: 'button',
      title: `Send this event to ${sink} again`,
      onclick: action(context, async () => {
        await api('POST', itemPath('events', event, '/resend'), { sink });
        return `Event queued for ${sink} again.`;
      }),
    },
    'Resend',
  );
}

const percent = (rate: number | null): string => (rate === null ? '—' : `${(rate * 100).toFixed(1)} %`);
const millis = (ms: number | undefined): string => (ms === undefined ? '—' : `${ms} ms`);

/** Success rate and p95 over the last hour, for the Sinks view. */
export async function lastHourHealth(name: string): Promise<{ successRate: string; p95: string }> {
  const { health } = await api<{ health: SinkHealth }>('GET', withQuery(sinkPath(name, 'health'), { window: '1h' }));
  return { successRate: percent(health.successRate), p95: millis(health.latencyMs?.p95) };
}

const WINDOWS = { '1h': 'Last hour', '24h': 'Last 24 hours' } as const;
type Window = keyof typeof WINDOWS;

/** One sink: its health over a window, attempts per minute by outcome, and its recent failed attempts. */
export function sinkView(context: ViewContext, name: string, query: URLSearchParams): View {
  const asked = query.get('window');
  const window: Window = asked === '24h' ? '24h' : '1h';
  const select = h('select', null, Object.entries(WINDOWS).map(([value, label]) => h('option', { value, selected: value === window }, label)));
  select.addEventListener('change', () => (location.hash = withQuery(route('sinks', name), { window: select.value })));
  const paging = pager(context);
  let chart: { destroy(): void } | undefined;
  return {
    title: `Sink ${name}`,
    controls: h('div', { class: 'filters' }, field('Window', select)),
    async load() {
      const [{ health }, { minutes }, failed] = await Promise.all([
        api<{ health: SinkHealth }>('GET', withQuery(sinkPath(name, 'health'), { window })),
        api<{ minutes: AttemptMinute[] }>('GET', withQuery(sinkPath(name, 'attempts-per-minute'), { window })),
        api<{ attempts: (Attempt & { eventId: string; account: string })[] } & Page>('GET', withQuery(sinkPath(name, 'failed-attempts'), { limit: '20', cursor: paging.cursor() })),
      ]);
      // Only the outcomes that occurred get a line.
      const points = minutes.map(({ start, ...counts }) => ({ start, counts: Object.fromEntries(Object.entries(counts).filter(([, n]) => n > 0)) }));
      const drawn = linesChart(`Attempts per minute by outcome, ${WINDOWS[window].toLowerCase()}`, points, chartWidth());
      chart?.destroy();
      chart = drawn.chart;
      const statuses = Object.entries(health.statuses).sort(([, a], [, b]) => b - a);
      const panel = h('div', { class: 'attempt-panel' });
      const rows: Child[][] = [
        ['Attempts', String(health.attempts)],
        ['Delivered', String(health.delivered)],
        ['Failed', String(health.failed)],
        ['Success rate', percent(health.successRate)],
        ['Latency p50 / p95 / p99', health.latencyMs ? `${health.latencyMs.p50} / ${health.latencyMs.p95} / ${health.latencyMs.p99} ms` : '—'],
        ['Last success', time(health.lastSuccessAt)],
        ['Last failure', time(health.lastFailureAt)],
        ['Last error', health.lastError ?? '—'],
      ];
      return h(
        'div',
        null,
        h('p', null, link('#/sinks', 'All sinks')),
        h('h2', null, 'Health'),
        table('Health', ['Figure', 'Value'], rows),
        statuses.length > 0 ? table('Answers', ['HTTP status or error', 'Attempts'], statuses.map(([key, count]) => [key, String(count)])) : null,
        h('div', { class: 'charts' }, drawn.node),
        h('h2', null, 'Recent failed attempts'),
        failed.attempts.length === 0 && paging.cursor() === null
          ? message('empty', 'No failed attempt recorded.')
          : h('div', null, attemptTable('Failed attempts', failed.attempts, panel, true), paging.controls(failed), panel),
      );
    },
  };
}
