import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import request from 'supertest';
import { beforeAll, describe, expect, it } from 'vitest';
import type { AuditEntry } from '../src/store/state/audit.js';
import { DAY_MS } from '../src/clock.js';
import { pruneExpired } from '../src/store/retention/prune.js';
import { engines } from './support/databases.js';
import { waitFor } from './support/fanout.js';
import { adminAuth, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import type { TestRelay } from './support/relay.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { requireBuild, runCli } from './support/process.js';

const { server, relay, defer } = fanoutFixture();

type Entry = AuditEntry;

const get = (t: TestRelay, path: string) => request(t.relay.internalApp).get(path).set(adminAuth);
const send = (t: TestRelay, method: 'post' | 'delete', path: string, body?: unknown) => {
  const call = request(t.relay.internalApp)[method](path).set(adminAuth);
  return body === undefined ? call : call.send(body as object);
};
const audit = async (t: TestRelay, query = ''): Promise<Entry[]> => {
  const response = await get(t, `/admin/audit${query}`);
  expect(response.status, response.text).toBe(200);
  return response.body.audit as Entry[];
};

/** A relay whose `picky` hook refuses everything (a dead letter at each event) beside a `good` one, and `count` dead letters. */
async function withDeadLetters(url: string, count: number, overrides: Record<string, unknown> = {}) {
  const picky = await server(() => 422);
  const good = await server();
  const t = await relay({ database: url, hooks: [hook('picky', picky.url), hook('good', good.url)], ...overrides });
  for (let i = 0; i < count; i++) await t.post({ boxId: `bx_${i}` });
  await waitFor(async () => {
    const rows = await outboxRows(t, 'picky');
    return rows.length === count && rows.every((r) => r.status === 'dead');
  }, `${count} dead letters`);
  const deadLetters = (await get(t, '/admin/dead-letters')).body.deadLetters as { id: number; eventId: string }[];
  return { t, ids: deadLetters.map((d) => d.id), eventIds: deadLetters.map((d) => d.eventId) };
}

describe.each(engines)('audit trail on $name', ({ url }) => {
  it('records each change the admin API makes, newest first, with who asked and what they asked', async () => {
    const { t, ids, eventIds } = await withDeadLetters(await url(), 3);
    const [first, second] = ids as [number, number];
    const at = (offsetMs: number) => new Date(t.clock.now() + offsetMs).toISOString();

    expect((await send(t, 'post', `/admin/dead-letters/${first}/retry`)).status).toBe(202);
    t.clock.advance(1000);
    expect((await send(t, 'delete', `/admin/dead-letters/${second}`)).status).toBe(204);
    t.clock.advance(1000);
    expect((await send(t, 'post', '/admin/dead-letters/retry', { sink: 'picky' })).status).toBe(202);
    t.clock.advance(1000);
    const since = new Date(t.clock.now() - 60_000).toISOString();
    expect((await send(t, 'post', '/admin/replay', { since, sink: 'good' })).body).toEqual({ ok: true, queued: 3 });
    expect((await send(t, 'post', '/admin/replay', { since })).status).toBe(202);
    expect((await send(t, 'post', '/admin/sinks/good/pause')).status).toBe(200);
    expect((await send(t, 'post', '/admin/sinks/good/resume')).status).toBe(200);
    expect((await send(t, 'delete', '/admin/boxes/bx_2')).status).toBe(204);

    const entries = await audit(t);
    expect(entries.map(({ id: _id, ...entry }) => entry)).toEqual([
      { at: at(0), action: 'forget', target: 'bx_2', by: '127.0.0.1', detail: { boxId: 'bx_2' } },
      { at: at(0), action: 'resume', target: 'good', by: '127.0.0.1', detail: { sink: 'good' } },
      { at: at(0), action: 'pause', target: 'good', by: '127.0.0.1', detail: { sink: 'good' } },
      { at: at(0), action: 'replay', target: null, by: '127.0.0.1', detail: { since } },
      { at: at(0), action: 'replay', target: 'good', by: '127.0.0.1', detail: { since, sink: 'good' } },
      { at: at(-1000), action: 'retry_all', target: 'picky', by: '127.0.0.1', detail: { sink: 'picky' } },
      { at: at(-2000), action: 'discard', target: String(second), by: '127.0.0.1', detail: { id: second } },
      { at: at(-3000), action: 'retry', target: String(first), by: '127.0.0.1', detail: { id: first } },
    ]);
    // Our additions: by target, and the retries and discards of one event's dead letters.
    expect((await audit(t, '?target=bx_2')).map((e) => e.action)).toEqual(['forget']);
    expect((await audit(t, `?eventId=${eventIds[0]}`)).map((e) => [e.action, e.target])).toEqual([['retry', String(first)]]);
    expect((await audit(t, `?eventId=${eventIds[1]}`)).map((e) => [e.action, e.target])).toEqual([['discard', String(second)]]);
    const entryIds = entries.map((e) => e.id);
    expect([...entryIds].sort((a, b) => b - a)).toEqual(entryIds);
    // One log line per action.
    const logged = t.logs.entries().filter((line) => String(line.msg).startsWith('operator action: '));
    expect(logged.map((line) => [line.action, line.target, line.by])).toEqual(entries.reverse().map((e) => [e.action, e.target, e.by]));
  });

  it('records nothing for a refused request', async () => {
    const { t, ids } = await withDeadLetters(await url(), 1);
    const refused: [number, string, 'post' | 'delete', string, unknown?][] = [
      [404, 'not_found', 'post', '/admin/dead-letters/999999/retry'],
      [400, 'invalid_request', 'post', '/admin/dead-letters/abc/retry'],
      [404, 'not_found', 'delete', '/admin/dead-letters/999999'],
      [400, 'invalid_request', 'post', '/admin/dead-letters/retry', { sink: 'nope' }],
      [400, 'invalid_request', 'post', '/admin/dead-letters/retry', { sink: 1 }],
      [400, 'invalid_request', 'post', '/admin/replay', { since: 'yesterday' }],
      [400, 'invalid_request', 'post', '/admin/replay', { since: '2026-11-21T09:00:00Z', sink: 'nope' }],
      [404, 'not_found', 'post', '/admin/sinks/nope/pause'],
      [404, 'not_found', 'post', '/admin/sinks/nope/resume'],
      [404, 'not_found', 'delete', '/admin/boxes/bx_unknown'],
      [409, 'reconcile_not_configured', 'post', '/admin/reconcile'],
    ];
    for (const [status, code, method, path, body] of refused) {
      const response = await send(t, method, path, body);
      expect([response.status, response.body.code], `${method} ${path}`).toEqual([status, code]);
    }
    const unauthenticated = await request(t.relay.internalApp).post(`/admin/dead-letters/${ids[0]}/retry`);
    expect(unauthenticated.status).toBe(401);
    expect(await audit(t)).toEqual([]);
    expect((await outboxRows(t, 'picky')).map((r) => r.status)).toEqual(['dead']);
    expect(t.logs.entries().filter((line) => String(line.msg).startsWith('operator action: '))).toEqual([]);
  });

  it('the change and its entry commit together: when the entry cannot be written, the change is not made', async () => {
    const { t, ids } = await withDeadLetters(await url(), 1);
    await t.relay.store.database.kysely.schema.alterTable('audit').renameTo('audit_away').execute();
    const discard = await send(t, 'delete', `/admin/dead-letters/${ids[0]}`);
    expect([discard.status, discard.body.code]).toEqual([500, 'internal_error']);
    const pause = await send(t, 'post', '/admin/sinks/good/pause');
    expect(pause.status).toBe(500);
    expect((await outboxRows(t, 'picky')).map((r) => [r.id, r.status])).toEqual([[ids[0], 'dead']]);
    expect((await get(t, '/admin/sinks')).body.sinks.find((s: { name: string }) => s.name === 'good').paused).toBe(false);
  });

  it('pages newest first, filters by action and target, and refuses bad parameters', async () => {
    const t = await relay({ database: await url(), hooks: [hook('good', 'http://127.0.0.1:9/')] });
    for (let i = 0; i < 3; i++) {
      await send(t, 'post', '/admin/sinks/good/pause');
      await send(t, 'post', '/admin/sinks/good/resume');
    }
    const page1 = await get(t, '/admin/audit?limit=4');
    expect(page1.body.audit.map((e: Entry) => e.action)).toEqual(['resume', 'pause', 'resume', 'pause']);
    expect(page1.body.nextCursor).toEqual(expect.any(String));
    const page2 = await get(t, `/admin/audit?limit=4&cursor=${page1.body.nextCursor}`);
    expect(page2.body).toEqual({ ok: true, audit: [expect.objectContaining({ action: 'resume' }), expect.objectContaining({ action: 'pause' })], nextCursor: null });
    const all = [...page1.body.audit, ...page2.body.audit] as Entry[];
    expect(new Set(all.map((e) => e.id)).size).toBe(6);

    const pauses = await audit(t, '?action=pause&limit=2');
    expect(pauses.map((e) => e.action)).toEqual(['pause', 'pause']);
    expect(await audit(t, '?target=good&action=resume')).toHaveLength(3);
    expect(await audit(t, '?target=other')).toEqual([]);
    expect(await audit(t, '?action=forget')).toEqual([]);

    for (const query of ['?action=delete', '?limit=0', '?limit=201', '?limit=x', '?cursor=nope', '?cursor=IngiIg', '?action=pause&action=resume']) {
      const response = await get(t, `/admin/audit${query}`);
      expect([response.status, response.body.code], query).toEqual([400, 'invalid_request']);
    }
    expect((await request(t.relay.internalApp).get('/admin/audit')).status).toBe(401);
    expect((await send(t, 'post', '/admin/audit')).status).toBe(405);
  });

  it('keeps entries for the retention window', async () => {
    const t = await relay({ database: await url(), hooks: [hook('good', 'http://127.0.0.1:9/')], retentionDays: 2 });
    await send(t, 'post', '/admin/sinks/good/pause');
    t.clock.advance(DAY_MS);
    await send(t, 'post', '/admin/sinks/good/resume');
    const result = await pruneExpired(t.relay.store.database, { now: t.clock.now() + DAY_MS + 1, retentionDays: 2 });
    expect(result.audit).toBe(1);
    expect((await audit(t)).map((e) => e.action)).toEqual(['resume']);
  });

  it('records a reconcile run once it has started, with what was asked', async () => {
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const t = await relay(
      { database: await url(), hooks: [hook('good', 'http://127.0.0.1:9/')], upstreamBaseUrl: upstream.baseUrl, upstreamApiKey: upstream.apiKey },
      { reconcile: { upstream: { minTimeout: 5, maxTimeout: 20, randomize: false } } },
    );
    expect((await send(t, 'post', '/admin/reconcile', { dryRun: true })).status).toBe(202);
    await waitFor(async () => (await get(t, '/admin/reconcile')).body.running === false, 'the run to end');
    expect((await send(t, 'post', '/admin/reconcile')).status).toBe(202);
    await waitFor(async () => (await get(t, '/admin/reconcile')).body.running === false, 'the run to end');
    expect((await audit(t)).map(({ action, target, by, detail }) => ({ action, target, by, detail }))).toEqual([
      { action: 'reconcile', target: null, by: '127.0.0.1', detail: {} },
      { action: 'reconcile', target: null, by: '127.0.0.1', detail: { dryRun: true } },
    ]);
  });
});

describe.each(engines)('audit trail of the CLI on $name', ({ url }) => {
  beforeAll(() => requireBuild());

  it('records retry, discard and replay with `cli` as who asked', async () => {
    const { t, ids } = await withDeadLetters(await url(), 2);
    const hooksFile = join(mkdtempSync(join(tmpdir(), 'boxrelay-hooks-')), 'hooks.yaml');
    writeFileSync(hooksFile, t.config.hooks.map((h) => `- name: ${h.name}\n  url: ${h.url}\n`).join(''));
    const env = { BOXRELAY_DATABASE: t.config.database, BOXRELAY_HOOKS_FILE: hooksFile, LOG_LEVEL: 'info' };
    const run = async (...args: string[]) => {
      const result = await runCli(args, env);
      expect(result.code, result.stderr).toBe(0);
      return result;
    };
    const retried = await run('dead-letters', 'retry', String(ids[0]));
    expect(retried.stderr).toContain('operator action: retry');
    await run('dead-letters', 'discard', '--all', '--sink', 'picky');
    await run('replay', '--since', '2026-11-21T09:00:00Z', '--sink', 'good');
    const refused = await runCli(['dead-letters', 'discard', '999999'], env);
    expect(refused.code).toBe(1);
    expect((await audit(t)).map(({ action, target, by, detail }) => ({ action, target, by, detail }))).toEqual([
      { action: 'replay', target: 'good', by: 'cli', detail: { since: '2026-11-21T09:00:00Z', sink: 'good' } },
      { action: 'discard', target: 'picky', by: 'cli', detail: { all: true, sink: 'picky' } },
      { action: 'retry', target: String(ids[0]), by: 'cli', detail: { id: ids[0] } },
    ]);
  });
});
