import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { listen, type Listening } from '../src/http/listen.js';
import { waitFor } from './support/fanout.js';
import { rawRequest, type RawAnswer } from './support/raw-http.js';
import { testRelay, type TestRelay } from './support/relay.js';
import { delivery } from './support/sign.js';

/** The receiver over a real socket, for what HTTP clients would not send. */
describe('POST /webhooks on the wire', () => {
  let t: TestRelay;
  let server: Listening;
  const answers: RawAnswer[] = [];
  beforeEach(async () => {
    t = await testRelay();
    server = await listen(t.relay.publicApp, 0, '127.0.0.1');
  });
  afterEach(async () => {
    for (const answer of answers.splice(0)) answer.socket.destroy();
    await server.close(0);
    await t.close();
  });

  const send = async (text: string) => {
    const answer = await rawRequest(server.port, text);
    answers.push(answer);
    return answer;
  };
  /** A signed delivery as raw request text, to `target`, with `extra` header lines. */
  const signedRequest = (target: string, extra: string[] = [], d = delivery({ timestamp: t.clock.seconds })) =>
    [
      `POST ${target} HTTP/1.1`,
      'Host: relay.test',
      ...Object.entries(d.headers).map(([name, value]) => `${name}: ${value}`),
      `Content-Length: ${d.body.length}`,
      ...extra,
      '',
      d.body.toString('latin1'),
    ].join('\r\n');
  const stored = async () =>
    Number((await t.relay.store.database.kysely.selectFrom('deliveries').select((eb) => eb.fn.countAll().as('n')).executeTakeFirstOrThrow()).n);

  it('accepts the exact path, with or without a query string', async () => {
    expect((await send(signedRequest('/webhooks'))).status).toBe(200);
    expect((await send(signedRequest('/webhooks?from=upstream'))).status).toBe(200);
    expect(await stored()).toBe(2);
  });

  for (const target of ['/WEBHOOKS', '/Webhooks', '/webhooks/', 'http://evil.example/webhooks', 'http://relay.test/webhooks?x=1']) {
    it(`404 not_found for POST ${target}, storing nothing`, async () => {
      const answer = await send(signedRequest(target));
      expect(answer.status).toBe(404);
      expect(JSON.parse(answer.body)).toMatchObject({ ok: false, code: 'not_found' });
      expect(answer.head).toMatch(/\r\nX-Request-Id: req_[0-9a-f]{32}\r\n/i);
      expect(await stored()).toBe(0);
    });
  }

  /** A request whose head declares a body that is never sent. */
  const withoutBody = (headers: Record<string, string>) =>
    ['POST /webhooks HTTP/1.1', 'Host: relay.test', ...Object.entries(headers).map(([n, v]) => `${n}: ${v}`), 'Content-Length: 100000', '', ''].join('\r\n');

  for (const [name, change, code] of [
    ['a missing header', { 'X-Service-Signature': '' }, 'missing_header'],
    ['a repeated header', { 'X-Service-Delivery': 'evt_a\r\nX-Service-Delivery: evt_b' }, 'duplicate_header'],
    ['a malformed timestamp', { 'X-Service-Timestamp': '1e9' }, 'malformed_timestamp'],
    ['a timestamp out of the window', { 'X-Service-Timestamp': '1000' }, 'timestamp_out_of_window'],
  ] as const) {
    it(`answers ${name} before the body with Connection: close, and closes without waiting for the body`, async () => {
      const headers: Record<string, string> = { ...delivery({ timestamp: t.clock.seconds }).headers, ...change };
      const answer = await send(withoutBody(Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== ''))));
      expect(JSON.parse(answer.body)).toMatchObject({ ok: false, code });
      expect(answer.head).toMatch(/\r\nConnection: close(\r\n|$)/i);
      // The server would otherwise read the declared body for up to 30 s (its request timeout).
      await waitFor(() => answer.socket.closed, 'the server to close the connection', 5_000);
    });
  }

  it('keeps the connection open after a refusal that read the whole body', async () => {
    const answer = await send(signedRequest('/webhooks', [], delivery({ timestamp: t.clock.seconds, secret: 'whsec_wrong' })));
    expect(answer.status).toBe(401);
    expect(answer.head).toMatch(/\r\nConnection: keep-alive\r\n/i);
  });
});
