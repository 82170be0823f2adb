import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { celList, celMap } from '@bufbuild/cel';
import { COST_LIMIT, celEventOf, type CelEvent } from '../src/sinks/cel-budget.js';
import { FilterError, compileFilter } from '../src/sinks/filter.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { runCli } from './support/process.js';
import type { TestRelay } from './support/relay.js';
import { SECRET, eventId } from './support/sign.js';
import { cloudEvent } from './support/cloud-event.js';
import { sqliteFile } from './support/databases.js';

/** The cookbook of docs/hooks.md, as configured there. */
const COOKBOOK = {
  production: 'event.data.box.name.startsWith("prod-")',
  webErrors: 'event.type == "box.error" && event.data.box.name.matches("^web-[0-9]+$")',
  recovered: 'event.data.previousState == "error" && event.data.state in ["ready", "running", "idle"]',
  failedWhileRunning: 'event.type == "box.error" && has(event.data.previousState) && event.data.previousState == "running"',
  notFromHistory: '!has(event.boxrelayorigin) || event.boxrelayorigin != "history"',
};


describe('filter expressions (CEL)', () => {
  const box = { box: { id: 'bx_1', name: 'prod-web-1' }, state: 'error', previousState: 'running' };

  it('evaluates over `event`, the CloudEvent with its data', () => {
    expect(compileFilter('event.type == "box.error" && event.data.box.name.startsWith("prod-")').matches(cloudEvent(box))).toBe(true);
    expect(compileFilter('event.subject == "bx_1" && event.source == "sandbox" && event.id == "evt_1"').matches(cloudEvent(box))).toBe(true);
    expect(compileFilter(COOKBOOK.production).matches(cloudEvent({ box: { id: 'b', name: 'dev-1' } }))).toBe(false);
    expect(compileFilter('has(event.data.region)').matches(cloudEvent(box))).toBe(false);
    // JSON numbers are doubles; CEL compares them with ints.
    expect(compileFilter('event.data.count > 2').matches(cloudEvent({ count: 3 }))).toBe(true);
    expect(compileFilter(COOKBOOK.failedWhileRunning).matches(cloudEvent(box))).toBe(true);
    expect(compileFilter(COOKBOOK.failedWhileRunning).matches(cloudEvent({ box: box.box, state: 'error' }))).toBe(false);
    expect(compileFilter(COOKBOOK.notFromHistory).matches(cloudEvent(box))).toBe(true);
    expect(compileFilter(COOKBOOK.notFromHistory).matches({ ...cloudEvent(box), boxrelayorigin: 'history' })).toBe(false);
    expect(compileFilter(COOKBOOK.notFromHistory).matches({ ...cloudEvent(box), boxrelayorigin: 'synthesized' })).toBe(true);
  });

  it('refuses at compile time: bad syntax, an unknown variable, comprehensions nested too deep, an over-long expression', () => {
    const refused = (expression: string) => {
      try {
        compileFilter(expression);
      } catch (error) {
        return (error as Error).message;
      }
      throw new Error(`${expression} compiled`);
    };
    expect(refused('event.type ==')).toMatch(/./);
    expect(refused('evnt.type == "box.error"')).toBe('unknown name "evnt" (the variable is `event`)');
    expect(refused('[1].all(a, [1].all(b, [1].all(c, [1].all(d, true))))')).toBe('comprehensions (all, exists, map, filter) nest more than 3 deep');
    expect(refused(`event.type == "${'x'.repeat(5000)}"`)).toBe('longer than 4096 characters');
    // Bound names of comprehensions are known inside them.
    expect(compileFilter('event.data.tags.exists(t, t == "x")').matches(cloudEvent({ tags: ['y', 'x'] }))).toBe(true);
  });

  it('a missing field, a wrong type or a result that is not a bool is an error (counted as false by the router)', () => {
    expect(() => compileFilter('event.data.region == "eu"').matches(cloudEvent(box))).toThrow(FilterError);
    expect(() => compileFilter('event.data.state + 1 == 2').matches(cloudEvent(box))).toThrow(FilterError);
    expect(() => compileFilter('event.data.state').matches(cloudEvent(box))).toThrow('the expression did not give a bool');
  });

  it('refuses by its cost limit nested comprehensions over a big list, and comprehensions over literals that multiply', () => {
    const list = Array.from({ length: 20_000 }, (_, i) => i);
    const hostile = compileFilter('event.data.items.exists(a, event.data.items.exists(b, event.data.items.exists(c, a + b + c < 0.0)))');
    expect(() => hostile.matches(cloudEvent({ items: list }))).toThrow(/cost limit exceeded/);
    const literal = Array.from({ length: 40 }, (_, i) => i).join(',');
    expect(() => compileFilter(`[${literal}].all(a, [${literal}].all(b, [${literal}].all(c, a + b + c >= 0)))`).matches(cloudEvent(box))).toThrow(/cost limit/);
    // The same shape over a small list is within the limit.
    expect(hostile.matches(cloudEvent({ items: [1, 2, 3] }))).toBe(false);
    // A regular expression over a long string is priced per character (RE2: linear, but not free).
    expect(() => compileFilter('event.data.log.matches("(a+)+$")').matches(cloudEvent({ log: `${'a'.repeat(100_000)}b` }))).toThrow(/cost limit/);
    expect(compileFilter('event.data.log.matches("(a+)+$")').matches(cloudEvent({ log: 'aaab' }))).toBe(false);
  });

  /** `count` times `part` joined by `+`, in parentheses. */
  const joined = (part: string, count: number) => `(${Array.from({ length: count }, () => part).join(' + ')})`;

  it('counts the lists an expression builds: the event\'s list joined 80 times, looped over in a loop, stops within the budget', () => {
    // The event's 10 items, each read counted: the work the evaluation does, whatever the machine's speed.
    let reads = 0;
    const items = new Proxy(
      Array.from({ length: 10 }, (_, i) => i),
      {
        get(target, key, receiver) {
          if (typeof key === 'string' && /^[0-9]+$/.test(key)) reads++;
          return Reflect.get(target, key, receiver);
        },
      },
    );
    const event = cloudEvent({ items });
    // The event as CEL values, its list read through the counting proxy at each use.
    const cel: CelEvent = { value: celMap(new Map([['data', celMap(new Map([['items', celList(items)]]))]])), parts: new WeakMap() };
    const list = joined('event.data.items', 80);
    const filter = compileFilter(`${list}.all(a, ${list}.all(b, true))`);
    expect(() => filter.matches(event, cel)).toThrow(FilterError);
    expect(() => filter.matches(event, cel)).toThrow(/cost limit exceeded/);
    // Two evaluations, each stopped before it read more items than its budget allows.
    expect(reads).toBeLessThan(2 * 2 * COST_LIMIT);
    // The same expression over a list of one item (80 × 80 turns) is within the budget.
    expect(compileFilter(`${joined('event.data.one', 80)}.all(a, true)`).matches(cloudEvent({ one: [1] }))).toBe(true);
  });

  it('counts what `+` on lists, string concatenation and `map` make, each', () => {
    const items = Array.from({ length: 20 }, (_, i) => i);
    const event = cloudEvent({ items, s: 'x'.repeat(200) });
    // Cheap in nodes, dear in what they make.
    expect(() => compileFilter(`event.data.items.all(a, size(${joined('event.data.items', 40)}) > 0)`).matches(event)).toThrow(/cost limit exceeded/);
    expect(() => compileFilter(`event.data.items.all(a, ${joined('event.data.s', 40)}.size() > 0)`).matches(event)).toThrow(/cost limit exceeded/);
    const wide = cloudEvent({ items: Array.from({ length: 200 }, (_, i) => i) });
    expect(() => compileFilter('event.data.items.map(a, event.data.items).size() > 0').matches(wide)).toThrow(/cost limit exceeded/);
    // A few of each are within it.
    expect(compileFilter(`event.data.items.all(a, size(${joined('event.data.items', 3)}) == 60)`).matches(event)).toBe(true);
    expect(compileFilter(`${joined('event.data.s', 3)}.size() == 600`).matches(event)).toBe(true);
    expect(compileFilter('event.data.items.map(a, a * 2.0).filter(a, a > 30.0).size() == 4').matches(event)).toBe(true);
  });

  it('counts equality by all it may compare', () => {
    const nested = Array.from({ length: 100 }, (_, i) => Array.from({ length: 10 }, (_, j) => i * j));
    const event = cloudEvent({ items: Array.from({ length: 20 }, (_, i) => i), nested });
    expect(() => compileFilter('event.data.items.all(a, event.data.nested == event.data.nested)').matches(event)).toThrow(/cost limit exceeded/);
    expect(compileFilter('event.data.nested == event.data.nested').matches(event)).toBe(true);
  });

  it('a cost error is not hidden by `||`: the filter fails', () => {
    const event = cloudEvent({ items: Array.from({ length: 10 }, (_, i) => i) });
    const list = joined('event.data.items', 80);
    expect(() => compileFilter(`${list}.all(a, ${list}.all(b, true)) || true`).matches(event, celEventOf(event))).toThrow(/cost limit exceeded/);
  });

  it('takes a payload nested as deep as the receiver allows', () => {
    let deep: Record<string, unknown> = { leaf: 'yes' };
    for (let i = 0; i < 60; i++) deep = { a: deep };
    const path = `event.data${'.a'.repeat(60)}.leaf`;
    expect(compileFilter(`${path} == "yes" && event.data.a.exists(k, k == "a")`).matches(cloudEvent(deep))).toBe(true);
  });
});

describe('hook filters in the relay', () => {
  const { defer, server, relay } = fanoutFixture();

  const post = (t: TestRelay, type: string, data: Record<string, unknown>) => {
    const id = eventId();
    const createdAt = new Date(t.clock.now()).toISOString();
    return t.post({ id, type, body: JSON.stringify({ id, type, createdAt, data }) }).then((r) => {
      expect(r.status).toBe(200);
      return id;
    });
  };
  const bodies = (requests: { body: string }[]) => requests.map((r) => (JSON.parse(r.body) as { id: string }).id);

  it('gives a hook only the events its patterns match and its filter is true for: no fan-out row for the others', async () => {
    const [prod, web, recovered, all] = [await server(), await server(), await server(), await server()];
    const t = await relay({
      hooks: [
        hook('prod', prod.url, { filter: COOKBOOK.production }),
        hook('web-errors', web.url, { events: ['box.*'], filter: COOKBOOK.webErrors }),
        hook('recovered', recovered.url, { events: ['box.ready', 'box.error'], filter: COOKBOOK.recovered }),
        hook('all', all.url),
      ],
    });
    const e1 = await post(t, 'box.error', { box: { id: 'bx_1', name: 'prod-db-1' }, previousState: 'running', state: 'error' });
    const e2 = await post(t, 'box.error', { box: { id: 'bx_2', name: 'web-12' }, previousState: 'running', state: 'error' });
    const e3 = await post(t, 'box.ready', { box: { id: 'bx_2', name: 'web-12' }, previousState: 'error', state: 'ready' });
    const e4 = await post(t, 'box.ready', { box: { id: 'bx_3', name: 'prod-web-1' }, previousState: 'cloning', state: 'ready' });
    await all.received(4);
    for (const sink of ['prod', 'web-errors', 'recovered', 'all']) await allDelivered(t, sink);
    expect(bodies(prod.requests)).toEqual([e1, e4]);
    expect(bodies(web.requests)).toEqual([e2]);
    expect(bodies(recovered.requests)).toEqual([e3]);
    expect(bodies(all.requests)).toEqual([e1, e2, e3, e4]);
    // The event's deliveries name only the sinks it was routed to.
    const shown = await request(t.relay.internalApp).get(`/admin/events/${e2}`).set(adminAuth);
    expect(shown.body.deliveries.map((d: { sink: string }) => d.sink).sort()).toEqual(['all', 'web-errors']);
    expect(await metricValue(t.registry, 'boxrelay_filter_errors_total', { sink: 'prod' })).toBe(0);
  });

  it('counts an evaluation error as false, in boxrelay_filter_errors_total{sink}, logged at warn at most once a minute per hook', async () => {
    const [regional, all] = [await server(), await server()];
    const t = await relay({ hooks: [hook('regional', regional.url, { filter: 'event.data.region == "eu"' }), hook('all', all.url)] });
    const data = { box: { id: 'bx_1', name: 'n' }, state: 'error', previousState: 'running' };
    await post(t, 'box.error', data);
    await post(t, 'box.error', data);
    t.clock.advance(59_000);
    await post(t, 'box.error', data);
    const warnings = () => t.logs.entries().filter((e) => String(e.msg).startsWith('a hook filter failed') && e.sink === 'regional');
    expect(await metricValue(t.registry, 'boxrelay_filter_errors_total', { sink: 'regional' })).toBe(3);
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]).toMatchObject({ level: 40, error: 'field not found: region', errorsNotLogged: 0 });
    t.clock.advance(1_000);
    const euId = await post(t, 'box.error', { ...data, region: 'eu' });
    await post(t, 'box.error', data);
    expect(warnings()).toHaveLength(2);
    expect(warnings()[1]).toMatchObject({ errorsNotLogged: 2 });
    expect(await metricValue(t.registry, 'boxrelay_filter_errors_total', { sink: 'regional' })).toBe(4);
    await all.received(5);
    await allDelivered(t, 'regional');
    expect(bodies(regional.requests)).toEqual([euId]);
    expect(await outboxRows(t, 'regional')).toEqual([]);
  });

  it('a hostile expression over a big list errors (false) for that hook; the event is accepted and goes to the others', async () => {
    const [hostile, all] = [await server(), await server()];
    const expression = 'event.data.items.exists(a, event.data.items.exists(b, event.data.items.exists(c, a + b + c < 0.0)))';
    const t = await relay({ hooks: [hook('hostile', hostile.url, { filter: expression }), hook('all', all.url)], maxBodyBytes: 1_000_000 });
    const items = Array.from({ length: 50_000 }, (_, i) => i);
    const id = await post(t, 'box.error', { box: { id: 'bx_1', name: 'n' }, items });
    await all.received(1);
    expect(await metricValue(t.registry, 'boxrelay_filter_errors_total', { sink: 'hostile' })).toBe(1);
    expect(t.logs.entries().find((e) => e.sink === 'hostile')).toMatchObject({ error: expect.stringMatching(/^cost limit exceeded/) });
    expect(bodies(all.requests)).toEqual([id]);
    expect(hostile.requests).toEqual([]);
    // The same filter on a small list is evaluated (false here, so nothing is sent).
    await post(t, 'box.error', { box: { id: 'bx_1', name: 'n' }, items: [1, 2] });
    await all.received(2);
    expect(await metricValue(t.registry, 'boxrelay_filter_errors_total', { sink: 'hostile' })).toBe(1);
  });

  it('filters operator events and replays', async () => {
    const [refusing, watcher, prod] = [await server(() => 400), await server(), await server()];
    const t = await relay({
      hooks: [
        hook('strict', refusing.url),
        hook('other', refusing.url),
        hook('watch', watcher.url, { events: ['boxrelay.*'], filter: 'event.type == "boxrelay.event.dead_lettered" && event.data.sink == "strict"' }),
        hook('prod', prod.url, { filter: COOKBOOK.production }),
      ],
    });
    const first = await post(t, 'box.error', { box: { id: 'bx_1', name: 'prod-1' } });
    await post(t, 'box.error', { box: { id: 'bx_2', name: 'dev-1' } });
    await watcher.received(2);
    await waitFor(async () => (await outboxRows(t, 'other')).filter((r) => r.status === 'dead').length === 2, 'both dead letters of other');
    await allDelivered(t, 'watch');
    const announced = watcher.requests.map((r) => JSON.parse(r.body) as { type: string; data: { sink: string } });
    expect(announced.map((e) => [e.type, e.data.sink])).toEqual([
      ['boxrelay.event.dead_lettered', 'strict'],
      ['boxrelay.event.dead_lettered', 'strict'],
    ]);

    await allDelivered(t, 'prod');
    expect(bodies(prod.requests)).toEqual([first]);
    const replay = await request(t.relay.internalApp).post('/admin/replay').set(adminAuth).send({ since: new Date(t.clock.now() - 1000).toISOString(), sink: 'prod' });
    expect([replay.status, replay.body]).toEqual([202, { ok: true, queued: 1 }]);
    await prod.received(2);
    await allDelivered(t, 'prod');
    expect(bodies(prod.requests)).toEqual([first, first]);
  });

  describe('a filter that does not compile is a configuration error naming the hook (exit 2)', () => {
    it('loadConfig', async () => {
      const dir = await mkdtemp(join(tmpdir(), 'boxrelay-filter-'));
      defer(() => rm(dir, { recursive: true, force: true }));
      const file = join(dir, 'hooks.yaml');
      writeFileSync(file, JSON.stringify([{ name: 'broken', url: 'https://hooks.example/x', filter: 'event.data.box.name.startsWith(' }]));
      let problems: string[] = [];
      try {
        loadConfig({ env: { BOXRELAY_HOOKS_FILE: file } });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        problems = (error as ConfigError).problems;
      }
      expect(problems).toHaveLength(1);
      expect(problems[0]).toMatch(/^hooks file: hooks\.0\.filter: hook broken: filter does not compile: /);

      const result = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile(), BOXRELAY_HOOKS_FILE: file, PORT: '0', BOXRELAY_INTERNAL_PORT: '0' });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('hook broken: filter does not compile');
    });
  });
});
