import { createHmac } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { hookSchema } from '../src/config/schema.js';
import type { CloudEvent } from '../src/events/cloudevent.js';
import { createHttpHookSink } from '../src/sinks/http-hook.js';
import { PermanentFailure } from '../src/sinks/failures.js';
import { ManualClock } from './support/clock.js';
import { sqliteFile } from './support/databases.js';
import { hookServer, type HookServer } from './support/hook-server.js';
import { requireBuild, runCli } from './support/process.js';
import { HOOK_SECRET } from './support/admin.js';
import { SECRET } from './support/sign.js';

const TOKEN = 'Bearer s3cret-token-value';
const BROKEN = `${TOKEN}\nX-Injected: 1`;

/** A config file with one hook whose `headers` are given. */
function configFile(headers: Record<string, string>): string {
  const path = join(mkdtempSync(join(tmpdir(), 'boxrelay-hook-headers-')), 'config.json');
  writeFileSync(path, JSON.stringify({ hooks: [{ name: 'alerts', url: 'http://127.0.0.1:9/hook', headers }] }));
  return path;
}

describe('hook headers', () => {
  describe('the CLI', () => {
    beforeAll(requireBuild);

    it('serve refuses such a header with a non-zero exit, without printing the value', async () => {
      const result = await runCli(['serve'], {
        BOXRELAY_SECRETS: SECRET,
        BOXRELAY_DATABASE: sqliteFile(),
        PORT: '0',
        BOXRELAY_INTERNAL_PORT: '0',
        BOXRELAY_CONFIG: configFile({ Authorization: BROKEN }),
      });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('hook alerts, header "Authorization"');
      expect(result.stdout + result.stderr).not.toContain('s3cret');
    });
  });

  describe('a hook request that cannot be built', () => {
    let receiver: HookServer | undefined;
    afterEach(async () => {
      await receiver?.close();
      receiver = undefined;
    });

    const event = (id: string): CloudEvent => ({
      specversion: '1.0',
      id,
      source: 'sandbox',
      type: 'box.ready',
      subject: 'bx_1',
      time: new Date(0).toISOString(),
      datacontenttype: 'application/json',
      data: {},
      boxrelayaccount: 'default',
    });

    it('is a permanent failure that quotes no header value, and sends nothing', async () => {
      receiver = await hookServer();
      // As if loaded before headers were checked: the value never reaches the failure.
      const hook = { ...hookSchema.parse({ name: 'alerts', url: receiver.url }), headers: { Authorization: BROKEN } };
      const sink = createHttpHookSink({ hook, clock: new ManualClock() });
      const failure = await sink.deliver(event('evt_1'), new AbortController().signal).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(PermanentFailure);
      expect((failure as PermanentFailure).summary).toBe('invalid_request: the request cannot be built: a header value is not valid HTTP (not shown)');
      expect(JSON.stringify(failure)).not.toContain('s3cret');

      // A stored event id outside Latin-1 cannot be a webhook-id: never sendable, so dead-lettered at once.
      const plain = createHttpHookSink({ hook: hookSchema.parse({ name: 'plain', url: receiver.url }), clock: new ManualClock() });
      await expect(plain.deliver(event('evt_\u20ac'), new AbortController().signal)).rejects.toBeInstanceOf(PermanentFailure);
      // Data nested deeper than JSON.stringify can write (stored before the receiver's depth limit).
      const deep = { ...event('evt_deep'), data: JSON.parse(`{"nested":${'['.repeat(10_000)}${']'.repeat(10_000)}}`) as Record<string, unknown> };
      await expect(plain.deliver(deep, new AbortController().signal)).rejects.toMatchObject({ code: 'event_not_serializable', retryable: false });
      await plain.deliver(event('evt_2'), new AbortController().signal);
      expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual(['evt_2']);
    });
  });

  describe('a signed hook request', () => {
    let receiver: HookServer | undefined;
    afterEach(async () => {
      await receiver?.close();
      receiver = undefined;
    });

    it('carries webhook-id, webhook-timestamp and webhook-signature v1,<base64>, verified by the standardwebhooks library', async () => {
      receiver = await hookServer();
      const clock = new ManualClock(Date.now());
      const sink = createHttpHookSink({ hook: hookSchema.parse({ name: 'signed', url: receiver.url, secret: HOOK_SECRET }), clock });
      const event: CloudEvent = { specversion: '1.0', id: 'evt_signed', source: 'sandbox', type: 'box.ready', subject: 'bx_1', time: new Date(0).toISOString(), datacontenttype: 'application/json', data: { note: 'é' }, boxrelayaccount: 'default' };
      await sink.deliver(event, new AbortController().signal);
      const [request] = await receiver.received(1);
      const { headers, body } = request!;
      const timestamp = String(Math.floor(clock.now() / 1000));
      expect(headers['webhook-id']).toBe('evt_signed');
      expect(headers['webhook-timestamp']).toBe(timestamp);
      // The documented scheme, computed here without the library: HMAC-SHA256 of id.timestamp.body under the decoded key.
      const key = Buffer.from(HOOK_SECRET.slice('whsec_'.length), 'base64');
      const expected = createHmac('sha256', key).update(`evt_signed.${timestamp}.${body}`).digest('base64');
      expect(headers['webhook-signature']).toBe(`v1,${expected}`);
      expect(new Webhook(HOOK_SECRET).verify(body, headers as Record<string, string>)).toMatchObject({ id: 'evt_signed', data: { note: 'é' } });
      expect(() => new Webhook(`whsec_${Buffer.from('another key').toString('base64')}`).verify(body, headers as Record<string, string>)).toThrow();
    });
  });
});
