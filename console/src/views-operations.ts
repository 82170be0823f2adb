import { api, ApiError, withQuery, type DeadLetter, type HookRow, type Page, type ReconcileStatus, type SinkRow } from './api.js';
import { chartWidth, countChart, PERIODS, type Period, type StatsBucket } from './charts.js';
import { field, h, itemLink, link, message, route, table, time, type Child } from './dom.js';
import { lastHourHealth } from './views-attempts.js';
import { action, fetchSinks, listOrEmpty, localToIso, pager, sinkSelect, type View, type ViewContext } from './view.js';

/** Dead letters, by sink: each retried or discarded, or all of one sink retried. */
export function deadLettersView(context: ViewContext, query: URLSearchParams): View {
  const sink = query.get('sink');
  const paging = pager(context);
  const select = sinkSelect(sink, context);
  select.addEventListener('change', () => (location.hash = withQuery('#/dead-letters', { sink: select.value })));
  const retryAll = h(
    'button',
    {
      type: 'button',
      disabled: !sink,
      title: sink ? `Retry every dead letter of ${sink}` : 'Choose a sink first',
      onclick: action(context, async () => {
        const { retried } = await api<{ retried: number }>('POST', '/admin/dead-letters/retry', { sink });
        return `${retried} dead letter(s) of ${sink} queued for another try.`;
      }),
    },
    'Retry all',
  );
  return {
    title: 'Dead letters',
    controls: h('div', { class: 'filters' }, field('Sink', select), retryAll, sink ? null : h('span', { class: 'hint' }, 'Choose a sink to retry all its dead letters.')),
    async load() {
      const page = await api<{ deadLetters: DeadLetter[] } & Page>('GET', withQuery('/admin/dead-letters', { sink, limit: '50', cursor: paging.cursor() }));
      const rows = page.deadLetters.map((d) => [
        String(d.id),
        itemLink('events', { id: d.eventId, account: d.account }),
        d.account,
        d.sink,
        String(d.attempts),
        d.lastError ?? '—',
        time(d.failedAt),
        h(
          'span',
          { class: 'actions' },
          h('button', { type: 'button', title: `Retry dead letter ${d.id}`, onclick: action(context, async () => (await api('POST', `/admin/dead-letters/${d.id}/retry`), `Dead letter ${d.id} queued for another try.`)) }, 'Retry'),
          h('button', { type: 'button', class: 'danger', title: `Discard dead letter ${d.id}`, onclick: action(context, async () => (await api('DELETE', `/admin/dead-letters/${d.id}`), `Dead letter ${d.id} discarded.`)) }, 'Discard'),
        ),
      ]);
      const empty = sink ? `No dead letters for ${sink}.` : 'No dead letters: every sink has taken every event it was sent.';
      return listOrEmpty('Dead letters', ['Id', 'Event', 'Account', 'Sink', 'Attempts', 'Last error', 'Failed', 'Actions'], rows, page, paging, empty);
    },
  };
}

/** Replay: queue the deliveries received since a time again, to every sink or one. */
export function replayView(context: ViewContext): View {
  const since = h('input', { type: 'datetime-local', required: true });
  const select = sinkSelect(null, context);
  const form = h(
    'form',
    {
      class: 'filters',
      onsubmit: async (event) => {
        event.preventDefault();
        const iso = localToIso(since.value);
        if (iso === null) return context.notify('error', 'Give the time to replay from.');
        try {
          const { queued } = await api<{ queued: number }>('POST', '/admin/replay', { since: iso, ...(select.value ? { sink: select.value } : {}) });
          context.notify('done', `${queued} deliveries queued again.`);
        } catch (error) {
          context.fail(error);
        }
      },
    },
    field('Since', since),
    field('Sink', select),
    h('button', { type: 'submit' }, 'Replay'),
  );
  return {
    title: 'Replay',
    controls: h(
      'div',
      null,
      h('p', null, 'Sends every stored event received since this time (in your time zone) again, keeping its id, so receivers can tell a replay.'),
      form,
    ),
  };
}

/** The sinks table, shared by Overview and Sinks (which adds each sink's last hour and actions); a sink links to its page. */
export function sinkTable(sinks: SinkRow[], action?: (sink: SinkRow) => Node, lastHour?: { successRate: string; p95: string }[]): Node {
  if (sinks.length === 0) return message('empty', 'No sink is configured: set a bus URL (BOXRELAY_NATS_URL, BOXRELAY_AMQP_URL, BOXRELAY_REDIS_URL, BOXRELAY_MQTT_URL) or add hooks to fan events out.');
  const headers = ['Sink', 'Kind', 'Up', 'Paused', 'Pending', 'Dead letters', ...(lastHour ? ['Success (1 h)', 'p95 (1 h)'] : []), ...(action ? ['Actions'] : [])];
  return table(
    'Sinks',
    headers,
    sinks.map((s, i) => [
      link(route('sinks', s.name), s.name),
      s.kind,
      h('span', { class: `badge ${s.up ? 'ok' : 'bad'}` }, s.up ? 'up' : 'down'),
      s.paused ? 'paused' : 'no',
      s.throttled ? h('span', null, String(s.pending), ' ', h('span', { class: 'badge warn', title: 'waiting for its turn under maxPerSecond' }, 'throttled')) : String(s.pending),
      s.deadLetters > 0 ? link(`#/dead-letters?sink=${encodeURIComponent(s.name)}`, String(s.deadLetters)) : '0',
      ...(lastHour ? [lastHour[i]?.successRate ?? '—', lastHour[i]?.p95 ?? '—'] : []),
      ...(action ? [action(s)] : []),
    ]),
  );
}

/** Sinks with their last hour (success rate, p95 latency) and Pause / Resume. */
export function sinksView(context: ViewContext): View {
  return {
    title: 'Sinks',
    async load() {
      const [sinks, { hooks }, { log }] = await Promise.all([
        fetchSinks(),
        api<{ hooks: HookRow[] }>('GET', '/admin/hooks'),
        api<{ log: { heldBackSeconds: number } }>('GET', '/admin/log'),
      ]);
      const lastHour = await Promise.all(sinks.map((s) => lastHourHealth(s.name)));
      const toggle = (s: SinkRow) => {
        const verb = s.paused ? 'resume' : 'pause';
        return h(
          'button',
          {
            type: 'button',
            title: `${s.paused ? 'Resume' : 'Pause'} deliveries to ${s.name}`,
            onclick: action(context, async () => {
              await api('POST', `/admin/sinks/${encodeURIComponent(s.name)}/${verb}`);
              return `${s.name} ${s.paused ? 'resumed' : 'paused'}.`;
            }),
          },
          s.paused ? 'Resume' : 'Pause',
        );
      };
      return h(
        'div',
        null,
        log.heldBackSeconds >= 5
          ? h(
              'p',
              { class: 'warning', role: 'alert' },
              `Every sink is held back: a stored delivery has waited ${Math.round(log.heldBackSeconds)} s for its place in the log ` +
                '(something locks the deliveries table on PostgreSQL). Nothing is lost; it goes out once numbered.',
            )
          : null,
        sinkTable(sinks, toggle, lastHour),
        h('p', { class: 'hint' }, 'A paused sink keeps its events waiting (none is dead-lettered) until it is resumed.'),
        hooks.length === 0 ? null : [h('h2', null, 'Hooks'), hookTable(hooks)],
      );
    },
  };
}

interface Readiness {
  ok: boolean;
  checks?: Record<string, string>;
}

/** Readiness, sinks, charts of traffic and failures, the last hour's events and the last reconcile run, at a glance. */
export function overviewView(query: URLSearchParams): View {
  const asked = query.get('period');
  const period: Period = asked !== null && asked in PERIODS ? (asked as Period) : '24h';
  const select = h('select', null, Object.entries(PERIODS).map(([value, { label }]) => h('option', { value, selected: value === period }, label)));
  select.addEventListener('change', () => (location.hash = withQuery('#/', { period: select.value })));
  /** The charts on show, destroyed when the next refresh draws new ones. */
  let charts: { destroy(): void }[] = [];
  return {
    title: 'Overview',
    controls: h('div', { class: 'filters' }, field('Charts period', select)),
    async load() {
      const hourAgo = new Date(Date.now() - 3_600_000).toISOString();
      const { ms, bucket, label } = PERIODS[period];
      const statsQuery = { since: new Date(Date.now() - ms).toISOString(), bucket };
      const [readiness, sinks, lastHour, reconcile, stats] = await Promise.all([
        fetch('/readyz', { cache: 'no-store', credentials: 'omit' }).then((r) => r.json() as Promise<Readiness>),
        fetchSinks(),
        api<{ events: unknown[] } & Page>('GET', withQuery('/admin/events', { since: hourAgo, limit: '200' })),
        api<ReconcileStatus>('GET', '/admin/reconcile').catch((error: unknown) => {
          if (error instanceof ApiError && error.code === 'reconcile_not_configured') return null;
          throw error;
        }),
        api<{ buckets: StatsBucket[] }>('GET', withQuery('/admin/stats', statsQuery)),
      ]);
      const width = chartWidth();
      const accepted = countChart(`Accepted events per type, ${label.toLowerCase()}`, stats.buckets, 'accepted', width);
      const failed = countChart(`Failed attempts per sink, ${label.toLowerCase()}`, stats.buckets, 'failed', width);
      for (const chart of charts) chart.destroy();
      charts = [accepted.chart, failed.chart].filter((chart) => chart !== undefined);
      const checks = Object.entries(readiness.checks ?? {});
      return h(
        'div',
        { class: 'overview' },
        h('h2', null, 'Readiness: ', h('span', { class: `badge ${readiness.ok ? 'ok' : 'bad'}` }, readiness.ok ? 'ready' : 'not ready')),
        table('Readiness checks', ['Check', 'Status'], checks.map(([name, status]) => [name, h('span', { class: `badge ${status === 'ok' ? 'ok' : 'bad'}` }, status)])),
        h('h2', null, 'Sinks'),
        sinkTable(sinks),
        h('h2', null, 'Traffic and failures'),
        h('div', { class: 'charts' }, accepted.node, failed.node),
        h('h2', null, 'Last hour'),
        h('p', null, `${lastHour.events.length}${lastHour.nextCursor ? ' or more' : ''} events received in the last hour. `, link('#/events', 'See events')),
        h('h2', null, 'Reconciliation'),
        reconcile === null
          ? h('p', null, 'Not configured (set the upstream API settings to repair missed webhooks).')
          : h('p', null, reconcileSummary(reconcile)),
      );
    },
  };
}

/** One account's reconciliation in a sentence: its last run, and whether one is under way. */
export function reconcileSummary({ running, last }: ReconcileStatus): Child {
  if (!last) return running ? 'The first run is in progress.' : 'No run yet.';
  return [`Last run: ${last.outcome ?? 'running'}, started `, time(last.startedAt), `, ${last.boxesRepaired} boxes repaired`, last.error ? ` (${last.error})` : '', running ? '; a run is in progress.' : '.'];
}

/** Each hook's events, format, filter and transform (its own or its built-in format's CEL), read only. */
function hookTable(hooks: HookRow[]): HTMLElement {
  const code = (text: string | null) => (text === null ? '—' : h('pre', { class: 'json', tabindex: 0 }, text));
  return table(
    'Hooks',
    ['Hook', 'Events', 'Format', 'Filter', 'Transform'],
    hooks.map((hook) => [hook.name, hook.events.join(', '), hook.format, code(hook.filter), code(hook.transform)]),
  );
}
