import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import request from 'supertest';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { signDelivery } from '../src/verify/signature.js';
import { engines } from './support/databases.js';
import { pendingCount } from './support/fanout-relay.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { SECRET, delivery, eventId, sendRaw } from './support/sign.js';

const OLD_SECRET = 'whsec_b2xkLXNlY3JldC1mZWRjYmE5ODc2NTQzMjEw';

for (const engine of engines) {
  describe(`POST /webhooks on ${engine.name}`, () => {
    let t: TestRelay;

    beforeEach(async () => {
      t = await testRelay({ database: await engine.migratedUrl(), secrets: [SECRET, OLD_SECRET], hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/x' }] });
    });
    afterEach(() => t.close());

    const counts = async () => {
      const db = t.relay.store.database.kysely;
      const one = async (table: 'deliveries' | 'outbox' | 'boxes') =>
        Number((await db.selectFrom(table).select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n);
      // Fan-out work: the routed events the hook's cursors have not passed (the relay is not started), and outbox rows.
      return { deliveries: await one('deliveries'), fanout: (await pendingCount(t, 'alerts')) + (await one('outbox')), boxes: await one('boxes') };
    };
    const nothingStored = async () => expect(await counts()).toEqual({ deliveries: 0, fanout: 0, boxes: 0 });

    const send = (d: { headers: Record<string, string>; body: Buffer }, path = '/webhooks') =>
      sendRaw(request(t.relay.publicApp).post(path).set(d.headers), d.body);

    const expectRefusal = (response: request.Response, status: number, code: string) => {
      expect(response.status).toBe(status);
      expect(response.body).toEqual({ ok: false, code, message: expect.any(String), requestId: expect.stringMatching(/^req_/) });
    };

    it('stores a valid delivery once with its fan-out row and box state, then answers duplicate', async () => {
      const d = delivery({ timestamp: t.clock.seconds, type: 'box.error', boxId: 'bx_abc', attempt: 3 });
      const first = await send(d);
      expect(first.status).toBe(200);
      expect(first.body).toEqual({ ok: true, id: d.id, duplicate: false });
      const again = await send(d);
      expect(again.body).toEqual({ ok: true, id: d.id, duplicate: true });

      expect(await counts()).toEqual({ deliveries: 1, fanout: 1, boxes: 1 });
      const row = await t.relay.store.database.kysely.selectFrom('deliveries').selectAll().executeTakeFirstOrThrow();
      expect(row).toMatchObject({ id: d.id, type: 'box.error', box_id: 'bx_abc', attempt: 3, received_at: t.clock.now(), payload: d.body.toString() });
    });

    it('stores the same delivery sent 50 times concurrently exactly once', async () => {
      const d = delivery({ timestamp: t.clock.seconds });
      const responses = await Promise.all(Array.from({ length: 50 }, () => send(d)));
      expect(responses.map((r) => r.status)).toEqual(Array(50).fill(200));
      expect(responses.filter((r) => r.body.duplicate === false)).toHaveLength(1);
      expect(await counts()).toEqual({ deliveries: 1, fanout: 1, boxes: 1 });
    });

    it('keeps the first copy when a duplicate id arrives with a different body, and warns', async () => {
      const id = eventId();
      await send(delivery({ id, timestamp: t.clock.seconds, boxName: 'first' }));
      const second = await send(delivery({ id, timestamp: t.clock.seconds, boxName: 'second' }));
      expect(second.body).toEqual({ ok: true, id, duplicate: true });
      const row = await t.relay.store.database.kysely.selectFrom('deliveries').select('payload').executeTakeFirstOrThrow();
      expect(row.payload).toContain('"first"');
      expect(t.logs.entries().some((e) => e.level === 40 && String(e.msg).includes('different body'))).toBe(true);
    });

    it('accepts a verified event of a type outside box.* (no box needed)', async () => {
      const id = eventId();
      const body = JSON.stringify({ id, type: 'account.updated', createdAt: '2026-11-21T10:00:00.000Z', data: { plan: 'pro' } });
      const response = await send(delivery({ id, timestamp: t.clock.seconds, type: 'account.updated', body }));
      expect(response.body).toEqual({ ok: true, id, duplicate: false });
      expect(await counts()).toMatchObject({ deliveries: 1, boxes: 0 });
    });

    it('verifies with the whole secret string and with the base64 key after whsec_', async () => {
      // The keys are derived here as the contract words them, not by the code under test.
      const utf8Key = Buffer.from(SECRET, 'utf8');
      const base64Key = Buffer.from(SECRET.slice('whsec_'.length), 'base64');
      for (const key of [utf8Key, base64Key]) {
        const d = delivery({ timestamp: t.clock.seconds });
        const signature = signDelivery(key, d.id, String(t.clock.seconds), d.body);
        expect((await send({ ...d, headers: { ...d.headers, 'X-Service-Signature': signature } })).status).toBe(200);
      }
    });

    it('accepts old and new secrets during rotation and counts the slot that matched', async () => {
      expect((await send(delivery({ timestamp: t.clock.seconds, secret: SECRET }))).status).toBe(200);
      expect((await send(delivery({ timestamp: t.clock.seconds, secret: OLD_SECRET }))).status).toBe(200);
      const metrics = await t.registry.getSingleMetricAsString('boxrelay_signature_secret_matches_total');
      expect(metrics).toContain('boxrelay_signature_secret_matches_total{account="default",slot="0"} 1');
      expect(metrics).toContain('boxrelay_signature_secret_matches_total{account="default",slot="1"} 1');
    });

    it('accepts any well-formed v1 item among several, ignoring other schemes', async () => {
      const d = delivery({ timestamp: t.clock.seconds });
      const good = d.headers['X-Service-Signature'] as string;
      const header = `v0=abc v1=${'0'.repeat(64)} ${good.toUpperCase().replace('V1=', 'v1=')}`;
      expect((await send({ ...d, headers: { ...d.headers, 'X-Service-Signature': header } })).status).toBe(200);
    });

    describe('refusals store nothing', () => {
      for (const header of ['X-Service-Delivery', 'X-Service-Timestamp', 'X-Service-Signature']) {
        it(`400 missing_header without ${header}, and with it empty`, async () => {
          const d = delivery({ timestamp: t.clock.seconds });
          const { [header]: _omitted, ...without } = d.headers;
          expectRefusal(await send({ ...d, headers: without }), 400, 'missing_header');
          expectRefusal(await send({ ...d, headers: { ...d.headers, [header]: ' ' } }), 400, 'missing_header');
          await nothingStored();
        });
      }

      // Node joins most repeated headers with ", "; each header line must count on its own.
      const repeated = (d: { headers: Record<string, string> }, header: string, values: string[]) =>
        Object.fromEntries(Object.entries(d.headers).filter(([name]) => name !== header).concat([[header, values as unknown as string]]));

      for (const header of ['X-Service-Delivery', 'X-Service-Timestamp']) {
        it(`400 duplicate_header for ${header} given twice, even with the same value`, async () => {
          const d = delivery({ timestamp: t.clock.seconds });
          const value = d.headers[header] as string;
          for (const values of [[value, value], [value, '1'], ['1', value]]) {
            const response = await send({ ...d, headers: repeated(d, header, values) });
            expectRefusal(response, 400, 'duplicate_header');
            expect(response.body.message).toContain(header);
          }
          await nothingStored();
          expect(await t.registry.getSingleMetricAsString('boxrelay_webhook_requests_total')).toContain('outcome="duplicate_header"} 3');
        });
      }

      it('answers missing_header before duplicate_header', async () => {
        const d = delivery({ timestamp: t.clock.seconds });
        const { 'X-Service-Signature': _omitted, ...without } = repeated(d, 'X-Service-Delivery', [d.id, d.id]);
        expectRefusal(await send({ ...d, headers: without }), 400, 'missing_header');
      });

      it('adds the items of a repeated X-Service-Signature header, whatever their order', async () => {
        const wrong = `v1=${'0'.repeat(64)}`;
        for (const order of ['good first', 'wrong first']) {
          const d = delivery({ timestamp: t.clock.seconds });
          const good = d.headers['X-Service-Signature'] as string;
          const values = order === 'good first' ? [good, wrong] : [wrong, good];
          expect((await send({ ...d, headers: repeated(d, 'X-Service-Signature', values) })).body).toEqual({ ok: true, id: d.id, duplicate: false });
        }
        const d = delivery({ timestamp: t.clock.seconds });
        expectRefusal(await send({ ...d, headers: repeated(d, 'X-Service-Signature', [wrong, 'v0=abc']) }), 401, 'invalid_signature');
        expectRefusal(await send({ ...d, headers: repeated(d, 'X-Service-Signature', ['v0=abc', ' ']) }), 401, 'malformed_signature');
      });

      for (const timestamp of ['12.5', '-100', '+100', '1e9', 'abc', '0x10', '1_000', '12 34']) {
        it(`400 malformed_timestamp for ${JSON.stringify(timestamp)}`, async () => {
          const d = delivery({ timestamp: t.clock.seconds });
          expectRefusal(await send({ ...d, headers: { ...d.headers, 'X-Service-Timestamp': timestamp } }), 400, 'malformed_timestamp');
          await nothingStored();
        });
      }

      it('accepts exactly +-300 s and refuses +-301 s with 401 timestamp_out_of_window', async () => {
        for (const offset of [-300, 300]) {
          expect((await send(delivery({ timestamp: t.clock.seconds + offset }))).status).toBe(200);
        }
        await t.relay.store.database.kysely.deleteFrom('outbox').execute();
        await t.relay.store.database.kysely.deleteFrom('boxes').execute();
        await t.relay.store.database.kysely.deleteFrom('deliveries').execute();
        for (const offset of [-301, 301]) {
          expectRefusal(await send(delivery({ timestamp: t.clock.seconds + offset })), 401, 'timestamp_out_of_window');
        }
        await nothingStored();
      });

      it('checks the window before the body size', async () => {
        const d = delivery({ timestamp: t.clock.seconds - 1000, body: 'x'.repeat(t.config.maxBodyBytes + 1) });
        expectRefusal(await send(d), 401, 'timestamp_out_of_window');
      });

      it('accepts a body of exactly the limit and refuses one byte more with 413 payload_too_large', async () => {
        const exact = paddedBody(t.config.maxBodyBytes);
        expect((await send(delivery({ id: exact.id, timestamp: t.clock.seconds, body: exact.body }))).status).toBe(200);
        await t.relay.store.database.kysely.deleteFrom('outbox').execute();
        await t.relay.store.database.kysely.deleteFrom('boxes').execute();
        await t.relay.store.database.kysely.deleteFrom('deliveries').execute();
        const over = paddedBody(t.config.maxBodyBytes + 1);
        const response = await send(delivery({ id: over.id, timestamp: t.clock.seconds, body: over.body }));
        expectRefusal(response, 413, 'payload_too_large');
        expect(response.headers.connection).toBe('close');
        await nothingStored();
      });

      for (const signature of ['v1=abc', `v2=${'a'.repeat(64)}`, `v1=${'g'.repeat(64)}`, `v1=${'a'.repeat(63)}`, `v1 ${'a'.repeat(64)}`, `sha256=${'a'.repeat(64)}`]) {
        it(`401 malformed_signature for ${signature.slice(0, 12)}...`, async () => {
          const d = delivery({ timestamp: t.clock.seconds, signature });
          expectRefusal(await send(d), 401, 'malformed_signature');
          await nothingStored();
        });
      }

      it('401 invalid_signature for a wrong secret and for a body tampered by one byte', async () => {
        expectRefusal(await send(delivery({ timestamp: t.clock.seconds, secret: 'whsec_wrong' })), 401, 'invalid_signature');
        const d = delivery({ timestamp: t.clock.seconds });
        const tampered = Buffer.from(d.body);
        tampered.writeUInt8(tampered.readUInt8(tampered.length - 2) ^ 1, tampered.length - 2);
        expectRefusal(await send({ ...d, body: tampered }), 401, 'invalid_signature');
        await nothingStored();
      });

      it('401 invalid_signature when the signature is for another delivery id or timestamp', async () => {
        const d = delivery({ timestamp: t.clock.seconds });
        expectRefusal(await send({ ...d, headers: { ...d.headers, 'X-Service-Timestamp': String(t.clock.seconds - 1) } }), 401, 'invalid_signature');
        await nothingStored();
      });

      const invalidBodies: Record<string, (id: string) => string> = {
        'not JSON': () => '{"id":',
        'a JSON array': () => '[]',
        'JSON null': () => 'null',
        'id not a string': () => JSON.stringify({ id: 1, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: 'bx_1' } } }),
        'type missing': (id) => JSON.stringify({ id, createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: 'bx_1' } } }),
        'createdAt not ISO 8601': (id) => JSON.stringify({ id, type: 'box.ready', createdAt: 'yesterday', data: { box: { id: 'bx_1' } } }),
        'data not an object': (id) => JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: [] }),
        'box event without data.box.id': (id) => JSON.stringify({ id, type: 'box.error', createdAt: '2026-11-21T10:00:00.000Z', data: { state: 'error' } }),
        'box event with an empty box id': (id) => JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: '' } } }),
        // The relay's own operator event types (contract section 2): never taken from outside.
        'of a boxrelay. type': (id) => JSON.stringify({ id, type: 'boxrelay.sink.paused', createdAt: '2026-11-21T10:00:00.000Z', subject: 'alerts', data: { sink: 'alerts' } }),
      };
      for (const [name, body] of Object.entries(invalidBodies)) {
        it(`400 invalid_event when the signed body is ${name}`, async () => {
          const id = eventId();
          expectRefusal(await send(delivery({ id, timestamp: t.clock.seconds, body: body(id) })), 400, 'invalid_event');
          await nothingStored();
        });
      }

      // Contract section 2's receiver limits; each refusal names the limit it applies.
      // Arrays nested `depth` levels; inside `data`, two levels deeper in the body.
      const nested = (depth: number) => '['.repeat(depth) + ']'.repeat(depth);
      const limitBodies: Record<string, { id?: string; body: (id: string) => string; message: RegExp }> = {
        'an id of 257 characters': { id: 'evt_'.padEnd(257, 'x'), body: (id) => eventBody(id), message: /^id .*256/ },
        'a box id of 257 characters': { body: (id) => eventBody(id, { data: { box: { id: 'b'.repeat(257) } } }), message: /data\.box\.id.*256/ },
        'a type of 129 characters': { body: (id) => eventBody(id, { type: `box.${'t'.repeat(125)}` }), message: /type.*128/ },
        'a 200 KB type': { body: (id) => eventBody(id, { type: 't'.repeat(200_000) }), message: /type.*128/ },
        'JSON nested 65 levels': { body: (id) => eventBody(id, { data: { box: { id: 'bx_1' }, deep: JSON.parse(nested(63)) } }), message: /nesting.*64/ },
        // PostgreSQL's text holds no U+0000: a key holding it is refused on both engines alike.
        'a box id holding U+0000': { body: (id) => eventBody(id, { data: { box: { id: 'bx_\u0000' } } }), message: /data\.box\.id holds U\+0000/ },
        'a type holding U+0000': { body: (id) => eventBody(id, { type: 'box.ready\u0000' }), message: /type holds U\+0000/ },
        'JSON nested 5,000 levels': { body: (id) => eventBody(id, { data: { box: { id: 'bx_1' } } }).replace('{"id":"bx_1"}', `{"id":"bx_1","deep":${nested(5000)}}`), message: /nesting.*64/ },
      };
      for (const [name, { id = eventId(), body, message }] of Object.entries(limitBodies)) {
        it(`400 invalid_event naming the limit for ${name}`, async () => {
          const response = await send(delivery({ id, timestamp: t.clock.seconds, body: body(id) }));
          expectRefusal(response, 400, 'invalid_event');
          expect(response.body.message).toMatch(message);
          await nothingStored();
        });
      }

      it('accepts an id and box id of 256 characters (code points), a type of 128 and nesting of 64 levels (brackets in strings do not count)', async () => {
        const id = 'evt_'.padEnd(256, 'x');
        const body = eventBody(id, { type: `box.${'t'.repeat(124)}`, data: { box: { id: '\u{1F4E6}'.repeat(256) }, deep: JSON.parse(nested(62)), note: `"${'['.repeat(100)}` } });
        expect((await send(delivery({ id, timestamp: t.clock.seconds, body }))).body).toEqual({ ok: true, id, duplicate: false });
      });

      it('400 invalid_event for a signed body that is not valid UTF-8', async () => {
        const id = eventId();
        const [before, after] = eventBody(id, { data: { box: { id: 'bx_@' } } }).split('@') as [string, string];
        const body = Buffer.concat([Buffer.from(before), Buffer.from([0xff, 0xfe]), Buffer.from(after)]);
        const response = await send(delivery({ id, timestamp: t.clock.seconds, body }));
        expectRefusal(response, 400, 'invalid_event');
        expect(response.body.message).toMatch(/UTF-8/);
        await nothingStored();
      });

      it('400 delivery_id_mismatch when the body id differs from X-Service-Delivery', async () => {
        const d = delivery({ timestamp: t.clock.seconds });
        const other = delivery({ id: d.id, timestamp: t.clock.seconds, body: d.body.toString().replace(d.id, eventId()) });
        expectRefusal(await send(other), 400, 'delivery_id_mismatch');
        await nothingStored();
      });

      it('404 not_found for another path and 405 method_not_allowed for another method', async () => {
        const d = delivery({ timestamp: t.clock.seconds });
        expectRefusal(await send(d, '/hooks'), 404, 'not_found');
        const get = await request(t.relay.publicApp).get('/webhooks');
        expectRefusal(get, 405, 'method_not_allowed');
        expect(get.headers.allow).toBe('POST');
        expectRefusal(await sendRaw(request(t.relay.publicApp).put('/webhooks').set(d.headers), d.body), 405, 'method_not_allowed');
        expectRefusal(await request(t.relay.publicApp).get('/metrics'), 404, 'not_found');
        expectRefusal(await request(t.relay.publicApp).get('/admin/events'), 404, 'not_found');
        await nothingStored();
      });

      it('503 storage_unavailable when the database cannot commit, and 200 once it can', async () => {
        const d = delivery({ timestamp: t.clock.seconds });
        const release = await blockWrites(t);
        try {
          expectRefusal(await send(d), 503, 'storage_unavailable');
        } finally {
          await release();
        }
        await nothingStored();
        expect((await send(d)).body).toEqual({ ok: true, id: d.id, duplicate: false });
      });
    });

    it('never puts a secret or signature into error bodies or logs', async () => {
      const responses = [
        await send(delivery({ timestamp: t.clock.seconds, secret: 'whsec_wrong' })),
        await send(delivery({ timestamp: t.clock.seconds, signature: `v1=${'a'.repeat(63)}` })),
        await send(delivery({ timestamp: t.clock.seconds, body: '{"id": 1}' })),
      ];
      const ok = delivery({ timestamp: t.clock.seconds });
      await send(ok);
      const everything = [...responses.map((r) => r.text), t.logs.text()].join('\n');
      for (const secret of [SECRET, OLD_SECRET, 'whsec_wrong', (ok.headers['X-Service-Signature'] as string).slice(3)]) {
        expect(everything).not.toContain(secret);
      }
      expect(t.logs.entries().filter((e) => e.msg === 'delivery')).toHaveLength(4);
    });
  });
}

describe('log lines', () => {
  it('cut untrusted values short: a 15 KB X-Service-Delivery does not make a 15 KB line', async () => {
    const t = await testRelay();
    try {
      const huge = `evt_${'x'.repeat(15_000)}`;
      for (const signature of ['v1=abc', `v1=${'0'.repeat(64)}`]) {
        const d = delivery({ timestamp: t.clock.seconds, signature });
        const response = await sendRaw(request(t.relay.publicApp).post('/webhooks').set({ ...d.headers, 'X-Service-Delivery': huge }), d.body);
        expect(response.status).toBe(401);
      }
      const lines = t.logs.entries().filter((e) => e.msg === 'delivery');
      expect(lines).toHaveLength(2);
      for (const line of lines) expect(line.deliveryId).toMatch(/^evt_x+…/);
      expect(Math.max(...t.logs.lines.map((line) => line.length))).toBeLessThan(1000);
    } finally {
      await t.close();
    }
  });
});

describe('restart', () => {
  it('keeps deduplicating on the same database file after a restart', async () => {
    const first = await testRelay();
    const d = delivery({ timestamp: first.clock.seconds });
    expect((await sendRaw(request(first.relay.publicApp).post('/webhooks').set(d.headers), d.body)).body.duplicate).toBe(false);
    await first.close();
    const second = await testRelay({ database: first.config.database });
    second.clock.set(first.clock.now());
    const again = await sendRaw(request(second.relay.publicApp).post('/webhooks').set(d.headers), d.body);
    expect(again.body).toEqual({ ok: true, id: d.id, duplicate: true });
    await second.close();
  });
});

/** A valid box.ready body with some fields replaced. */
function eventBody(id: string, fields: Record<string, unknown> = {}): string {
  return JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: 'bx_1' } }, ...fields });
}

/** A valid event whose JSON is padded to exactly `size` bytes. */
function paddedBody(size: number): { id: string; body: string } {
  const id = eventId();
  const base = { id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: 'bx_pad', name: 'pad' }, state: 'ready', previousState: 'cloning', pad: '' } };
  const padding = size - Buffer.byteLength(JSON.stringify(base));
  return { id, body: JSON.stringify({ ...base, data: { ...base.data, pad: 'x'.repeat(padding) } }) };
}

/** Makes commits fail: SQLite's write lock held by another connection (as a stuck writer would). */
async function blockWrites(t: TestRelay): Promise<() => Promise<void>> {
  const database = t.relay.store.database;
  if (database.dialect === 'sqlite') {
    database.sqlite.pragma('busy_timeout = 20');
    const other = new BetterSqlite3(t.config.database);
    other.exec('BEGIN IMMEDIATE');
    return async () => {
      other.exec('ROLLBACK');
      other.close();
      database.sqlite.pragma(`busy_timeout = ${t.config.busyTimeoutMs}`);
    };
  }
  // PostgreSQL would wait on a lock indefinitely; a missing table fails the commit at once instead.
  const other = new pg.Client(t.config.database);
  await other.connect();
  await other.query('ALTER TABLE deliveries RENAME TO deliveries_away');
  return async () => {
    await other.query('ALTER TABLE deliveries_away RENAME TO deliveries');
    await other.end();
  };
}

describe('box events with an unusual box name', () => {
  it('accepts a box event whose data.box.name is null or a number, and stores the name as null: only data.box.id is required', async () => {
    const t = await testRelay();
    try {
      for (const name of [null, 42]) {
        const id = eventId();
        const body = JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: `bx_${String(name)}`, name }, state: 'ready' } });
        expect((await t.post({ id, body })).body).toEqual({ ok: true, id, duplicate: false });
      }
      const names = await t.relay.store.database.kysely.selectFrom('boxes').select('name').execute();
      expect(names).toEqual([{ name: null }, { name: null }]);
    } finally {
      await t.close();
    }
  });
});

for (const engine of engines) {
  describe(`strings holding U+0000 on ${engine.name}`, () => {
    // PostgreSQL answered 503 storage_unavailable for ever (its text holds no U+0000) where SQLite stored it.
    it('stores a box event whose name and states hold U+0000: the payload as received, the box row with U+FFFD in their place', async () => {
      const t = await testRelay({ database: await engine.migratedUrl() });
      try {
        const id = eventId();
        const body = JSON.stringify({ id, type: 'box.ready', createdAt: '2026-11-21T10:00:00.000Z', data: { box: { id: 'bx_nul', name: 'ci\u0000-42' }, previousState: 'clo\u0000ning', state: 'rea\u0000dy', note: '\u0000' } });
        expect((await t.post({ id, body })).body).toEqual({ ok: true, id, duplicate: false });
        const db = t.relay.store.database.kysely;
        expect(await db.selectFrom('deliveries').select('payload').execute()).toEqual([{ payload: body }]);
        expect(await db.selectFrom('boxes').select(['name', 'state']).execute()).toEqual([{ name: 'ci\uFFFD-42', state: 'rea\uFFFDdy' }]);
      } finally {
        await t.close();
      }
    });
  });
}
