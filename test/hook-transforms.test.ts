import { writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import request from 'supertest';
import { describe, expect, it } from 'vitest';
import { systemClock } from '../src/clock.js';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { hookSchema } from '../src/config/schema.js';
import { PAGERDUTY_TRANSFORM } from '../src/sinks/builtin-formats.js';
import { createHttpHookSink } from '../src/sinks/http-hook.js';
import { TransformCompileError, TransformFailedError, compileTransform, escapeMarkdown, hookTransformOf } from '../src/sinks/transform.js';
import { answering, discordShape, pagerDutyShape, teamsShape } from './support/alert-receivers.js';
import { ManualClock } from './support/clock.js';
import { cloudEvent } from './support/cloud-event.js';
import { sqliteFile } from './support/databases.js';
import { adminAuth, allDelivered, fanoutFixture, hook, metricValue, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { runCli } from './support/process.js';
import type { TestRelay } from './support/relay.js';
import { SECRET, delivery } from './support/sign.js';

const HOOK_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const ROUTING_KEY = 'R0123456789abcdef0123456789abcde';
/** Names and ids a box may carry that try to mention, link or mark up in a chat. */
const HOSTILE_NAME = '@everyone <@123456> <at>bob</at> [click](https://evil.example/x) **bold** _it_ `code` # head\n- item https://evil.example';

const box = { box: { id: 'bx_1', name: 'ci-42' }, state: 'error', previousState: 'running' };

describe('transform expressions (CEL)', () => {
  it('a map or list is JSON, a string is text, null is nothing; contentType replaces the type', () => {
    expect(compileTransform('{"box": event.data.box.id, "n": 1, "ok": true, "list": [1.5, null, "x"]}').bodyOf(cloudEvent(box))).toEqual({
      body: '{"box":"bx_1","n":1,"ok":true,"list":[1.5,null,"x"]}',
      contentType: 'application/json',
    });
    expect(compileTransform('[event.type, event.data]').bodyOf(cloudEvent(box))?.body).toBe(JSON.stringify(['box.error', box]));
    expect(compileTransform('"box " + event.data.box.name').bodyOf(cloudEvent(box))).toEqual({ body: 'box ci-42', contentType: 'text/plain; charset=utf-8' });
    expect(compileTransform('event.type == "box.error" ? {"a": 1} : null').bodyOf(cloudEvent(box, 'box.ready'))).toBeNull();
    expect(compileTransform('{"a": 1}', { contentType: 'application/vnd.acme+json' }).bodyOf(cloudEvent(box))?.contentType).toBe('application/vnd.acme+json');
    // The strings extension, and a `__proto__` key is a key like any other.
    expect(compileTransform('{"__proto__": event.data.box.name.upperAscii().replace("-", "_"), "tags": ["a", "b"].join(",")}').bodyOf(cloudEvent(box))?.body).toBe(
      '{"__proto__":"CI_42","tags":"a,b"}',
    );
  });

  it('refuses at compile time what does not compile, with its reason', () => {
    expect(() => compileTransform('{"a": ')).toThrow(TransformCompileError);
    expect(() => compileTransform('{"a": evnt.type}')).toThrow('unknown name "evnt"');
    expect(() => compileTransform(`"${'x'.repeat(5000)}"`)).toThrow('longer than 4096 characters');
  });

  it('fails on one event: a missing field, a value that is no body, a value that is not JSON', () => {
    const fails = (expression: string, data: Record<string, unknown> = box) => {
      try {
        compileTransform(expression).bodyOf(cloudEvent(data));
      } catch (error) {
        expect(error).toBeInstanceOf(TransformFailedError);
        expect((error as TransformFailedError).code).toBe('transform_failed');
        return (error as Error).message;
      }
      throw new Error(`${expression} did not fail`);
    };
    expect(fails('{"r": event.data.region}')).toBe('field not found: region');
    expect(fails('{"n": event.data.state + 1}')).toMatch(/no such overload|overload/);
    expect(fails('42')).toBe('the expression gave a int: a map, a list, a string or null is a body');
    expect(fails('{"b": b"x"}')).toBe('bytes are not JSON: give a string');
    expect(fails('{"t": timestamp(event.time)}')).toMatch(/not JSON/);
    expect(fails('{1: "x"}')).toBe('a map key is not a string: JSON object keys are strings');
  });

  it('bounds the cost: loops over big lists, strings grown by replace, a body that multiplies the event', () => {
    const items = Array.from({ length: 5_000 }, (_, i) => i);
    expect(() => compileTransform('event.data.items.map(a, event.data.items.map(b, a + b))').bodyOf(cloudEvent({ items }))).toThrow(/cost limit exceeded/);
    const grow = `event.data.s${'.replace("a", "aaaaaaaaaaaaaaaa")'.repeat(6)}`;
    expect(() => compileTransform(grow).bodyOf(cloudEvent({ s: 'a'.repeat(64) }))).toThrow(/cost limit exceeded/);
    const size = JSON.stringify(cloudEvent({ items })).length;
    const copies = `[${Array.from({ length: 50 }, () => 'event.data.items').join(', ')}]`;
    expect(() => compileTransform(copies).bodyOf(cloudEvent({ items }), size)).toThrow('cost limit exceeded: the body is too large');
    // The same expressions over small events are fine.
    expect(compileTransform(grow).bodyOf(cloudEvent({ s: 'b' }))?.body).toBe('b');
    expect(compileTransform('{"all": event}').bodyOf(cloudEvent({ items }), size)?.body).toBe(JSON.stringify({ all: cloudEvent({ items }) }));
  });

  it('counts what the string and list functions make: split, + on lists', () => {
    const event = cloudEvent({ items: Array.from({ length: 10 }, (_, i) => i), s: 'ab'.repeat(1000) });
    // Each split makes 2,000 items from one string: cheap in nodes, dear in what it makes (the body stays small).
    const splits = '{"n": event.data.items.map(a, event.data.s.split("")).size()}';
    expect(() => compileTransform(splits).bodyOf(event)).toThrow(TransformFailedError);
    expect(() => compileTransform(splits).bodyOf(event)).toThrow(/cost limit exceeded/);
    const list = `(${Array.from({ length: 80 }, () => 'event.data.items').join(' + ')})`;
    expect(() => compileTransform(`{"all": ${list}.all(a, ${list}.all(b, true))}`).bodyOf(event)).toThrow(/cost limit exceeded/);
    // A few are within the budget.
    expect(compileTransform('{"parts": event.data.s.substring(0, 5).split("b").join("-"), "n": size(event.data.items + event.data.items)}').bodyOf(event)?.body).toBe(
      '{"parts":"a-a-a","n":20}',
    );
  });

  it('escapeMarkdown leaves no markup, mention or link to a chat client, and plain names and ids as they are', () => {
    const escaped = escapeMarkdown(HOSTILE_NAME);
    expect(escaped).not.toMatch(/[\r\n]/);
    // Past the escaped characters (CommonMark and Discord read `\x` as a literal x), nothing that marks up, mentions or links.
    const bare = escaped.replace(/\\[!-/:-@[-`{-~]/g, '');
    expect(bare).not.toMatch(/[@<>[\]()*`|~\\]/);
    expect(bare).not.toContain('://');
    expect(bare.replace(/[A-Za-z0-9]_(?=[A-Za-z0-9])/g, '')).not.toContain('_');
    expect(escaped).toContain('\\@everyone \\<\\@123456\\>');
    expect(escapeMarkdown('a__b__c _i_ x_y')).toBe('a\\_\\_b\\_\\_c \\_i\\_ x_y');
    for (const plain of ['ci-42', 'bx_abc', 'box.error', 'prod-web.1', 'Ünïcode name']) expect(escapeMarkdown(plain)).toBe(plain);
  });

  it('runs once per event and hook, not once per attempt', async () => {
    const inner = hookTransformOf({ format: 'cloudevents', transform: '{"box": event.data.box.id}' })!;
    let evaluations = 0;
    const transform = { ...inner, bodyOf: (...args: Parameters<typeof inner.bodyOf>) => (evaluations++, inner.bodyOf(...args)) };
    const sent: string[] = [];
    let calls = 0;
    const fetch = (async (_url: string, init: RequestInit) => {
      sent.push(String(init.body));
      return new Response(null, { status: ++calls < 3 ? 503 : 200 });
    }) as unknown as typeof globalThis.fetch;
    const config = hookSchema.parse({ name: 'counted', url: 'https://hooks.example/x', transform: inner.expression });
    const sink = createHttpHookSink({ hook: config, clock: systemClock, fetch, transform });
    const event = cloudEvent(box);
    const signal = new AbortController().signal;
    await expect(sink.deliver(event, signal)).rejects.toThrow('hook answered 503');
    await expect(sink.deliver(event, signal)).rejects.toThrow('hook answered 503');
    await sink.deliver(event, signal);
    expect(sent).toEqual(Array(3).fill('{"box":"bx_1"}'));
    expect(evaluations).toBe(1);
    await sink.deliver(cloudEvent({ box: { id: 'bx_2' } }), signal);
    expect(evaluations).toBe(2);
  });
});

describe('transform configuration', () => {
  const refused = (hooks: unknown[]): string[] => {
    try {
      loadConfig({ env: { BOXRELAY_HOOKS_FILE: 'hooks.json' }, readFile: () => JSON.stringify(hooks) });
    } catch (error) {
      expect(error).toBeInstanceOf(ConfigError);
      return (error as ConfigError).problems;
    }
    throw new Error('accepted');
  };

  it('refuses a transform that does not compile, a transform beside another format, pagerduty without routingKey (naming the hook)', () => {
    const url = 'https://hooks.example/x';
    expect(refused([{ name: 'bad', url, transform: '{"a": ' }])).toEqual([expect.stringMatching(/hook bad: transform does not compile: /)]);
    expect(refused([{ name: 'both', url, format: 'slack', transform: '{"a": 1}' }])).toEqual([expect.stringContaining('hook both: a transform makes the body: format slack cannot go with it')]);
    expect(refused([{ name: 'pd', url, format: 'pagerduty' }])).toEqual([expect.stringContaining('hook pd: format pagerduty needs the routingKey')]);
    expect(refused([{ name: 'stray', url, format: 'discord', routingKey: ROUTING_KEY }])).toEqual([expect.stringContaining('hook stray: routingKey is for format pagerduty')]);
    expect(refused([{ name: 'ct', url, transform: '"x"', contentType: 'text/plain\n' }])).toEqual([expect.stringContaining('hook ct: contentType is not a valid HTTP header value')]);
  });

  it('exits 2 naming the hook', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'boxrelay-transform-'));
    try {
      const file = join(dir, 'hooks.yaml');
      writeFileSync(file, JSON.stringify([{ name: 'broken', url: 'https://hooks.example/x', transform: '{"summary": event.data.box.name +' }]));
      const result = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile(), BOXRELAY_HOOKS_FILE: file, PORT: '0', BOXRELAY_INTERNAL_PORT: '0' });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('hook broken: transform does not compile');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

const shown = async (t: TestRelay, id: string) => (await request(t.relay.internalApp).get(`/admin/events/${id}`).set(adminAuth)).body;

describe('hook transforms in the relay', () => {
  const { server, relay } = fanoutFixture();
  const statusOf = async (t: TestRelay, id: string, sink: string) =>
    ((await shown(t, id)).deliveries as { sink: string; status: string; lastError: string | null }[]).find((d) => d.sink === sink);

  it('sends the transformed body, signed over those bytes, as JSON or text', async () => {
    const [json, text] = [await server(), await server()];
    const t = await relay(
      {
        hooks: [
          hook('json', json.url, { secret: HOOK_SECRET, transform: '{"alert": event.type, "box": event.data.box.name}' }),
          hook('text', text.url, { transform: '"box " + event.data.box.id + " is " + event.data.state', contentType: 'text/markdown' }),
        ],
      },
      // Now, for the receiver's check of webhook-timestamp.
      { clock: new ManualClock(Date.now()) },
    );
    const posted = await t.post({ type: 'box.error', boxId: 'bx_7', boxName: 'ci-7' });
    const [sent] = await json.received(1);
    expect(sent!.body).toBe('{"alert":"box.error","box":"ci-7"}');
    expect(sent!.headers['content-type']).toBe('application/json');
    expect(sent!.headers['webhook-id']).toBe(posted.deliveryId);
    expect(new Webhook(HOOK_SECRET).verify(sent!.body, sent!.headers as Record<string, string>)).toEqual({ alert: 'box.error', box: 'ci-7' });
    const [plain] = await text.received(1);
    expect([plain!.body, plain!.headers['content-type']]).toEqual(['box bx_7 is error', 'text/markdown']);
    await allDelivered(t, 'json');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'json', outcome: 'delivered' })).toBe(1);
  });

  it('null sends nothing: counted skipped, shown delivered', async () => {
    const [errors, all] = [await server(), await server()];
    const t = await relay({ hooks: [hook('errors-only', errors.url, { transform: 'event.type == "box.error" ? {"box": event.data.box.id} : null' }), hook('all', all.url)] });
    const ready = await t.post({ type: 'box.ready' });
    const error = await t.post({ type: 'box.error' });
    await all.received(2);
    await errors.received(1);
    await allDelivered(t, 'errors-only');
    expect(JSON.parse(errors.requests[0]!.body)).toEqual({ box: 'bx_abc' });
    expect(await statusOf(t, ready.deliveryId, 'errors-only')).toMatchObject({ status: 'delivered' });
    expect(await statusOf(t, error.deliveryId, 'errors-only')).toMatchObject({ status: 'delivered' });
    const count = (outcome: string) => metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'errors-only', outcome });
    expect([await count('skipped'), await count('delivered'), await count('retried')]).toEqual([1, 1, 0]);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'all', outcome: 'skipped' })).toBe(0);
  });

  it('a failure on one event dead-letters it at once as transform_failed, counted; the other events flow', async () => {
    const [target, watcher] = [await server(), await server()];
    const t = await relay({
      hooks: [
        hook('regional', target.url, { transform: '{"region": event.data.region}', pauseAfter: '1ms' as never }),
        hook('watch', watcher.url, { events: ['boxrelay.*'] }),
      ],
    });
    expect(await metricValue(t.registry, 'boxrelay_transform_errors_total', { sink: 'regional' })).toBe(0);
    const failed = await t.post({ type: 'box.error' });
    const body = (region: string) => JSON.stringify({ id: `evt_${region}0123456789abcdef0123456789ab`, type: 'box.error', createdAt: new Date(t.clock.now()).toISOString(), data: { box: { id: 'bx_1' }, region } });
    const fine = await t.post({ id: `evt_eu0123456789abcdef0123456789ab`, body: body('eu') });
    await target.received(1);
    expect(JSON.parse(target.requests[0]!.body)).toEqual({ region: 'eu' });
    await waitFor(async () => (await outboxRows(t, 'regional')).some((row) => row.status === 'dead'), 'the dead letter');
    const [row] = await outboxRows(t, 'regional');
    expect(row).toMatchObject({ delivery_id: failed.deliveryId, status: 'dead', attempts: 1, last_error: 'transform_failed: field not found: region' });
    expect(await statusOf(t, failed.deliveryId, 'regional')).toMatchObject({ status: 'dead_lettered' });
    await waitFor(async () => (await statusOf(t, fine.deliveryId, 'regional'))?.status === 'delivered', 'the other event delivered');
    expect(await metricValue(t.registry, 'boxrelay_transform_errors_total', { sink: 'regional' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'regional', outcome: 'dead_lettered' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'regional', outcome: 'retried' })).toBe(0);
    // The event's fault, not the receiver's: the hook is not paused (pauseAfter 1ms), and the dead letter is announced.
    const [announced] = await watcher.received(1);
    expect(JSON.parse(announced!.body)).toMatchObject({ type: 'boxrelay.event.dead_lettered', data: { eventId: failed.deliveryId, sink: 'regional', lastError: 'transform_failed: field not found: region' } });
    const sinks = await request(t.relay.internalApp).get('/admin/sinks').set(adminAuth);
    expect(sinks.body.sinks.find((s: { name: string }) => s.name === 'regional')).toMatchObject({ paused: false, deadLetters: 1 });
    expect(t.logs.entries().filter((e) => String(e.msg).startsWith('a hook transform failed'))).toEqual([expect.objectContaining({ sink: 'regional', error: 'field not found: region' })]);
  });
});

describe('transforms in the fan-out worker thread (the default), through the built CLI', () => {
  const { server, serve } = fanoutFixture();

  it('a skipped event and a failed transform reach the main thread\'s /metrics; the failure is logged', async () => {
    const [quiet, regional] = [await server(), await server()];
    const dir = await mkdtemp(join(tmpdir(), 'boxrelay-transform-'));
    try {
      const hooks = [
        { name: 'quiet', url: quiet.url, transform: 'event.type == "box.error" ? "error" : null' },
        { name: 'regional', url: regional.url, transform: '{"region": event.data.region}' },
      ];
      writeFileSync(join(dir, 'hooks.json'), JSON.stringify(hooks));
      const relay = await serve({
        BOXRELAY_FANOUT_THREAD: 'worker',
        BOXRELAY_SECRETS: SECRET,
        BOXRELAY_DATABASE: join(dir, 'relay.db'),
        BOXRELAY_HOOKS_FILE: join(dir, 'hooks.json'),
      });
      const d = delivery({ timestamp: Math.floor(Date.now() / 1000), type: 'box.ready' });
      const res = await fetch(`http://127.0.0.1:${relay.port}/webhooks`, { method: 'POST', headers: d.headers, body: d.body });
      expect(res.status).toBe(200);
      const logged = await relay.waitForLog((e) => String(e.msg).startsWith('a hook transform failed'));
      expect(logged).toMatchObject({ sink: 'regional', error: 'field not found: region', level: 40 });
      const metric = (text: string, line: string) => text.split('\n').find((l) => l.startsWith(line));
      await waitFor(async () => {
        const text = await (await fetch(`http://127.0.0.1:${relay.internalPort}/metrics`)).text();
        return (
          metric(text, 'boxrelay_transform_errors_total{sink="regional"}') === 'boxrelay_transform_errors_total{sink="regional"} 1' &&
          metric(text, 'boxrelay_sink_deliveries_total{sink="quiet",outcome="skipped"}') === 'boxrelay_sink_deliveries_total{sink="quiet",outcome="skipped"} 1' &&
          metric(text, 'boxrelay_sink_deliveries_total{sink="regional",outcome="dead_lettered"}') === 'boxrelay_sink_deliveries_total{sink="regional",outcome="dead_lettered"} 1'
        );
      }, 'the worker\'s counts in /metrics');
      expect([quiet.requests, regional.requests]).toEqual([[], []]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('the admin API shows transforms, and what they make of a stored event', () => {
  const { server, relay } = fanoutFixture();

  it('GET /admin/hooks: filter and transform sources, no URL, secret or routing key; GET /admin/events/:id/bodies: each body or error', async () => {
    const target = await server();
    const t = await relay({
      hooks: [
        hook('pager', target.url, { format: 'pagerduty', routingKey: ROUTING_KEY, secret: HOOK_SECRET }),
        hook('plain', target.url, { filter: 'event.type == "box.error"' }),
        hook('regional', target.url, { events: ['box.error'], transform: '{"region": event.data.region}' }),
        hook('readies', target.url, { events: ['box.ready'], transform: '"ready"' }),
      ],
    });
    const listed = await request(t.relay.internalApp).get('/admin/hooks').set(adminAuth);
    expect(listed.status).toBe(200);
    expect(listed.body.hooks.map((h: { name: string; format: string; filter: string | null }) => [h.name, h.format, h.filter])).toEqual([
      ['pager', 'pagerduty', null],
      ['plain', 'cloudevents', 'event.type == "box.error"'],
      ['regional', 'cloudevents', null],
      ['readies', 'cloudevents', null],
    ]);
    expect(listed.body.hooks[0].transform).toBe(PAGERDUTY_TRANSFORM);
    expect(listed.body.hooks[1].transform).toBeNull();
    expect(JSON.stringify(listed.body)).not.toMatch(new RegExp(`${ROUTING_KEY}|${HOOK_SECRET}|127\\.0\\.0\\.1`));

    const posted = await t.post({ type: 'box.error', boxId: 'bx_5', boxName: 'ci-5' });
    const bodies = await request(t.relay.internalApp).get(`/admin/events/${posted.deliveryId}/bodies`).set(adminAuth);
    expect(bodies.status).toBe(200);
    expect(bodies.body.bodies.map((b: { sink: string }) => b.sink)).toEqual(['pager', 'regional']);
    expect(bodies.body.bodies[0]).toMatchObject({ sink: 'pager', skipped: false, contentType: 'application/json', error: null });
    expect(JSON.parse(bodies.body.bodies[0].body)).toMatchObject({ routing_key: '[redacted]', event_action: 'trigger', dedup_key: 'boxrelay-bx_5' });
    expect(bodies.body.bodies[1]).toEqual({ sink: 'regional', skipped: false, contentType: null, body: null, error: { code: 'transform_failed', message: 'field not found: region' } });
    // Evaluated on demand: nothing counted.
    await allDelivered(t, 'pager');
    expect(await metricValue(t.registry, 'boxrelay_transform_errors_total', { sink: 'regional' })).toBe(1);

    const missing = await request(t.relay.internalApp).get('/admin/events/evt_nope/bodies').set(adminAuth);
    expect([missing.status, missing.body.code]).toEqual([404, 'not_found']);
    expect((await request(t.relay.internalApp).get('/admin/hooks')).status).toBe(401);
  });
});

describe('built-in formats against stand-ins checking the services documented shapes', () => {
  const { server, relay } = fanoutFixture();

  it('pagerduty: a box error triggers once per box, its recovery resolves the same dedup_key, other types send nothing', async () => {
    const problems: string[][] = [];
    const pagerDuty = await server(answering(pagerDutyShape, 202, problems));
    const t = await relay({ source: 'sandbox-eu', hooks: [hook('pager', pagerDuty.url, { format: 'pagerduty', routingKey: ROUTING_KEY })] });
    const error = await t.post({ type: 'box.error', boxId: 'bx_9', boxName: 'ci-9' });
    await t.post({ type: 'box.hydrated', boxId: 'bx_9' });
    await t.post({ type: 'box.ready', boxId: 'bx_9' });
    await t.post({ type: 'box.error', boxId: 'bx_8', boxName: HOSTILE_NAME });
    await t.post({ type: 'box.archived', boxId: 'bx_8' });
    const sent = (await pagerDuty.received(4)).map((r) => JSON.parse(r.body) as Record<string, unknown>);
    expect(problems).toEqual([[], [], [], []]);
    const event = (await shown(t, error.deliveryId)).event as Record<string, unknown>;
    // What the admin API adds to the CloudEvent.
    delete event.receivedAt;
    delete event.account;
    expect(sent[0]).toEqual({
      routing_key: ROUTING_KEY,
      event_action: 'trigger',
      dedup_key: 'boxrelay-bx_9',
      payload: { summary: 'box ci-9 (bx_9) entered error', source: 'sandbox-eu', severity: 'error', custom_details: event },
    });
    expect(sent.slice(1).map((b) => [b.event_action, b.dedup_key])).toEqual([
      ['resolve', 'boxrelay-bx_9'],
      ['trigger', 'boxrelay-bx_8'],
      ['resolve', 'boxrelay-bx_8'],
    ]);
    expect(sent[1]).toEqual({ routing_key: ROUTING_KEY, event_action: 'resolve', dedup_key: 'boxrelay-bx_9' });
    await allDelivered(t, 'pager');
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'pager', outcome: 'skipped' })).toBe(1);
    expect(await metricValue(t.registry, 'boxrelay_sink_deliveries_total', { sink: 'pager', outcome: 'delivered' })).toBe(4);
  });

  it('teams and discord: the documented message shapes, the type, name and id in the text, escaped', async () => {
    const teamsProblems: string[][] = [];
    const discordProblems: string[][] = [];
    const teams = await server(answering(teamsShape, 202, teamsProblems));
    const discord = await server(answering(discordShape, 204, discordProblems));
    const t = await relay({ hooks: [hook('teams', teams.url, { format: 'teams' }), hook('discord', discord.url, { format: 'discord' })] });
    await t.post({ type: 'box.error', boxId: 'bx_1', boxName: 'ci-42' });
    await t.post({ type: 'box.error', boxId: 'bx_<@1>', boxName: HOSTILE_NAME });
    await t.post({ type: 'box.error', boxId: 'bx_long', boxName: 'n'.repeat(5000) });
    const cards = (await teams.received(3)).map((r) => JSON.parse(r.body));
    const messages = (await discord.received(3)).map((r) => JSON.parse(r.body));
    expect([teamsProblems, discordProblems]).toEqual([[[], [], []], [[], [], []]]);
    expect(cards[0]).toEqual({
      type: 'message',
      attachments: [
        {
          contentType: 'application/vnd.microsoft.card.adaptive',
          contentUrl: null,
          content: {
            $schema: 'http://adaptivecards.io/schemas/adaptive-card.json',
            type: 'AdaptiveCard',
            version: '1.4',
            body: [{ type: 'TextBlock', text: '**box.error**: box ci-42 (bx_1), now error', wrap: true }],
          },
        },
      ],
    });
    expect(messages[0]).toEqual({ content: '**box.error**: box ci-42 (bx_1), now error', allowed_mentions: { parse: [] } });
    for (const text of [cards[1].attachments[0].content.body[0].text as string, messages[1].content as string]) {
      // Past the bold type, only the text's own parentheses and comma are left unescaped.
      const unescaped = text.replace(/^\*\*box\.error\*\*: /, '').replace(/\\[!-/:-@[-`{-~]/g, '');
      expect(unescaped).not.toMatch(/[@<>[\]*`|~\n]/);
      expect(unescaped).not.toContain('://');
      expect(text).toContain(escapeMarkdown(HOSTILE_NAME));
      expect(text).toContain('\\@everyone');
      expect(text).toContain('bx\\_\\<\\@1\\>');
    }
    expect([...(messages[2].content as string)].length).toBeLessThanOrEqual(2000);
  });
});
