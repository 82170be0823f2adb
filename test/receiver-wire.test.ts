import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { listen, type Listening } from '../src/http/listen.js';
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
});
