import { inspect } from 'node:util';
import { createServer } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createUpstreamClient, type UpstreamClientOptions } from '../src/upstream/client.js';
import {
  UpstreamApiError,
  UpstreamError,
  UpstreamInvalidResponseError,
  UpstreamResponseLostError,
  UpstreamUnreachableError,
} from '../src/upstream/errors.js';
import { createSecretCipher, SecretCipherError } from '../src/upstream/secret-cipher.js';
import { startFakeSandbox, type FakeSandbox } from './support/fake-sandbox.js';

const input = { name: 'relay', url: 'https://relay.example.com/webhooks', events: ['box.ready', 'box.error'] };

let fake: FakeSandbox;
beforeEach(async () => {
  fake = await startFakeSandbox();
});
afterEach(async () => {
  await fake.close();
});

function client(overrides: Partial<UpstreamClientOptions> = {}) {
  return createUpstreamClient({ baseUrl: fake.baseUrl, apiKey: fake.apiKey, randomize: false, minTimeout: 1, ...overrides });
}

async function failure(promise: Promise<unknown>): Promise<UpstreamError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(UpstreamError);
  return error as UpstreamError;
}

/** Everything a log line or a CLI could print of the error, cause chain included. */
function everything(error: unknown): string {
  return `${String(error)}\n${inspect(error, { depth: 5 })}\n${JSON.stringify(error)}`;
}

describe('upstream client against the fake Sandbox Service', () => {
  it('creates an endpoint and returns its secret once, outside the webhook object', async () => {
    const { webhook, secret } = await client().createWebhook(input);
    expect(webhook).toMatchObject({ name: 'relay', url: input.url, events: input.events });
    expect(webhook.id).toMatch(/^wh_[a-f0-9]{24}$/);
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{32}$/);
    expect(secret).toBe(fake.secretOf(webhook.id));
    expect(webhook).not.toHaveProperty('secret');
    expect(fake.requests[0]).toMatchObject({ method: 'POST', path: '/v1/webhooks', authorization: `Bearer ${fake.apiKey}` });
  });

  it('joins paths whether or not baseUrl ends in a slash', async () => {
    await client({ baseUrl: `${fake.baseUrl}/` }).listWebhooks();
    await client({ baseUrl: fake.baseUrl }).listWebhooks();
    expect(fake.requests.map((r) => r.path)).toEqual(['/v1/webhooks', '/v1/webhooks']);
  });

  it.each(['webhooks', 'data', 'items', 'array'] as const)('lists webhooks given under %s', async (shape) => {
    const { webhook } = await client().createWebhook(input);
    fake.shapes.list = shape;
    const list = await client().listWebhooks();
    expect(list).toEqual([expect.objectContaining({ id: webhook.id, events: input.events, createdAt: expect.any(String) })]);
  });

  it.each(['nested', 'top-level'] as const)('reads a webhook given %s, keeping extra fields', async (shape) => {
    fake.shapes.webhook = shape;
    const { webhook, secret } = await client().createWebhook(input);
    expect(secret).toBe(fake.secretOf(webhook.id));
    expect(webhook).toMatchObject({ name: 'relay', url: input.url });
    if (shape === 'top-level') expect(webhook).toMatchObject({ ok: true, type: 'webhook.created' });
    expect(webhook).not.toHaveProperty('secret');
  });

  it('rotates', async () => {
    const api = client();
    const { webhook, secret } = await api.createWebhook(input);

    const rotated = await api.rotateWebhook(webhook.id);
    expect(rotated.webhook).toBeUndefined();
    expect(rotated.secret).toBe(fake.secretOf(webhook.id));
    expect(fake.endpoints()[0]?.previousSecrets).toEqual([secret]);

    fake.shapes.rotateIncludesWebhook = true;
    expect((await api.rotateWebhook(webhook.id)).webhook).toMatchObject({ id: webhook.id, name: 'relay' });
  });

  it('maps an error body to UpstreamApiError with the upstream code and requestId', async () => {
    const error = await failure(client().createWebhook({ ...input, events: ['box.exploded'] }));
    expect(error).toBeInstanceOf(UpstreamApiError);
    const api = error as UpstreamApiError;
    expect(api).toMatchObject({ code: 'upstream_api_error', status: 400, upstreamCode: 'invalid_events', details: { field: 'events' } });
    expect(api.requestId).toMatch(/^req_/);
    expect(api.message).toContain(api.requestId);

    const missing = await failure(client().rotateWebhook(`wh_${'0'.repeat(24)}`));
    expect(missing).toMatchObject({ status: 404, upstreamCode: 'not_found' });
  });

  it('maps 401 from a wrong key, and a non-JSON error body', async () => {
    const unauthorized = await failure(client({ apiKey: 'box_wrong' }).listWebhooks());
    expect(unauthorized).toMatchObject({ status: 401, upstreamCode: 'unauthorized' });

    fake.inject({ kind: 'raw', status: 502, body: '<html><body>Bad Gateway</body></html>' });
    const proxy = await failure(client({ retries: 0 }).listWebhooks());
    expect(proxy).toMatchObject({ code: 'upstream_api_error', status: 502, upstreamCode: 'http_502' });
    expect(proxy.message).toContain('non-JSON');
  });

  it('retries a GET on 503 and then succeeds', async () => {
    await client().createWebhook(input);
    fake.inject({ kind: 'error', method: 'GET', status: 503, times: 2 });
    const retried: number[] = [];
    const list = await client({ onRetry: ({ attempt }) => retried.push(attempt) }).listWebhooks();
    expect(list).toHaveLength(1);
    expect(fake.requests.filter((r) => r.method === 'GET').map((r) => r.outcome)).toEqual([503, 503, 200]);
    expect(retried).toEqual([2, 3]);
  });

  it('gives up after the retry budget with the last upstream error', async () => {
    fake.inject({ kind: 'error', status: 503, times: 10 });
    const error = await failure(client({ retries: 2 }).listWebhooks());
    expect(error).toMatchObject({ status: 503 });
    expect(fake.requests).toHaveLength(3);
  });

  it('waits at least Retry-After before retrying a 429', async () => {
    fake.inject({ kind: 'error', status: 429, code: 'rate_limited', retryAfter: '1' });
    const started = Date.now();
    await client().listWebhooks();
    expect(Date.now() - started).toBeGreaterThanOrEqual(950);
    expect(fake.requests.map((r) => r.outcome)).toEqual([429, 200]);
  });

  it('does not retry quota errors or a Retry-After beyond the limit', async () => {
    fake.inject({ kind: 'error', status: 429, code: 'daily_limit_reached' });
    expect(await failure(client().listWebhooks())).toMatchObject({ upstreamCode: 'daily_limit_reached' });
    fake.inject({ kind: 'error', status: 503, retryAfter: '3600' });
    expect(await failure(client().listWebhooks())).toMatchObject({ status: 503, retryAfterMs: 3_600_000 });
    expect(fake.requests).toHaveLength(2);
  });

  it('never retries a POST on 503: exactly one request', async () => {
    fake.inject({ kind: 'error', method: 'POST', status: 503, times: 5 });
    const error = await failure(client().createWebhook(input));
    expect(error).toMatchObject({ code: 'upstream_api_error', status: 503 });
    expect(fake.requests).toHaveLength(1);
  });

  it('reports a lost POST response with guidance, and does not retry it', async () => {
    fake.inject({ kind: 'drop', method: 'POST', afterProcessing: true });
    const error = await failure(client().createWebhook(input));
    expect(error).toBeInstanceOf(UpstreamResponseLostError);
    expect(error.code).toBe('upstream_response_lost');
    expect(error.message).toContain('boxrelay upstream list');
    expect(fake.requests).toHaveLength(1);
    expect(fake.endpoints()).toHaveLength(1); // it was created: the guidance is warranted
  });

  it('reports a rotate whose answer timed out as lost', async () => {
    const { webhook } = await client().createWebhook(input);
    fake.inject({ kind: 'delay', ms: 300, path: /rotate$/ });
    const error = await failure(client({ timeoutMs: 50 }).rotateWebhook(webhook.id));
    expect(error).toBeInstanceOf(UpstreamResponseLostError);
    expect(error.message).toContain(`boxrelay upstream rotate ${webhook.id}`);
  });

  it('calls a refused connection unreachable, even for a POST, and retries GETs on it', async () => {
    const baseUrl = `http://127.0.0.1:${await closedPort()}/v1`;
    const post = await failure(client({ baseUrl }).createWebhook(input));
    expect(post).toBeInstanceOf(UpstreamUnreachableError);
    expect(post.message).toContain('ECONNREFUSED');
    const retried: number[] = [];
    const get = await failure(client({ baseUrl, retries: 2, onRetry: ({ attempt }) => retried.push(attempt) }).listWebhooks());
    expect(get).toBeInstanceOf(UpstreamUnreachableError);
    expect(retried).toEqual([2, 3]);
  });

  it('rejects a 2xx body that is not JSON or lacks the secret', async () => {
    fake.inject({ kind: 'raw', status: 200, body: '{"ok":tru', method: 'GET' });
    expect(await failure(client().listWebhooks())).toBeInstanceOf(UpstreamInvalidResponseError);

    fake.inject({ kind: 'raw', status: 201, method: 'POST', contentType: 'application/json', body: JSON.stringify({ ok: true, webhook: { id: 'wh_1' } }) });
    const error = await failure(client().createWebhook(input));
    expect(error).toMatchObject({ code: 'upstream_invalid_response', status: 201 });
    expect(error.message).toContain('boxrelay upstream rotate');
  });

  it('refuses an invalid webhook id before any request', async () => {
    const api = client();
    for (const id of ['wh_../../boxes', 'wh_ABCDEF000000000000000000', `wh_${'0'.repeat(24)}/rotate`, '']) {
      expect(await failure(api.rotateWebhook(id))).toMatchObject({ code: 'invalid_webhook_id' });
    }
    expect(fake.requests).toHaveLength(0);
  });

  it('never puts the API key or a webhook secret into an error', async () => {
    const { webhook, secret } = await client().createWebhook(input);
    const secrets = [fake.apiKey, secret, fake.apiKey.slice('box_'.length)];
    // The upstream echoing the token or a secret in its message must not leak through either.
    fake.inject({ kind: 'error', status: 400, message: `bad token Bearer ${fake.apiKey} for ${secret}` });
    fake.inject({ kind: 'error', method: 'GET', status: 503, times: 2 });
    fake.inject({ kind: 'drop', method: 'POST', afterProcessing: false });
    fake.inject({ kind: 'raw', status: 200, method: 'POST', body: JSON.stringify({ secret: 42, webhook: { id: secret } }) });
    const errors = [
      await failure(client().listWebhooks()),
      await failure(client({ retries: 1 }).listWebhooks()),
      await failure(client().rotateWebhook(webhook.id)),
      await failure(client().rotateWebhook(webhook.id)),
      await failure(client().rotateWebhook(secret)),
      await failure(client().rotateWebhook(fake.apiKey)),
      await failure(client({ baseUrl: `http://127.0.0.1:${await closedPort()}/v1` }).listWebhooks()),
    ];
    expect(errors.map((e) => e.code)).toEqual([
      'upstream_api_error',
      'upstream_api_error',
      'upstream_response_lost',
      'upstream_invalid_response',
      'invalid_webhook_id',
      'invalid_webhook_id',
      'upstream_unreachable',
    ]);
    for (const error of errors) {
      for (const value of secrets) expect(everything(error)).not.toContain(value);
    }
  });

  it('refuses an API key that fetch would echo in its own error', () => {
    expect(() => createUpstreamClient({ baseUrl: fake.baseUrl, apiKey: 'box_abc\n' })).toThrow(/API key/);
    expect(() => createUpstreamClient({ baseUrl: fake.baseUrl, apiKey: 'box_abc\n' })).not.toThrow(/box_abc/);
  });
});

describe('secret cipher', () => {
  const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

  it('round-trips with a passphrase and with a base64 key, in the enc:v1 format', () => {
    const keys = ['correct horse battery staple', Buffer.alloc(32, 7).toString('base64'), `base64:${Buffer.alloc(32, 9).toString('base64')}`];
    for (const key of keys) {
      const cipher = createSecretCipher(key);
      const stored = cipher.encrypt(secret);
      expect(stored).toMatch(/^enc:v1:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/);
      expect(stored).not.toContain(secret);
      expect(cipher.encrypt(secret)).not.toBe(stored); // fresh IV each time
      expect(cipher.decrypt(stored)).toBe(secret);
      expect(createSecretCipher(key).decrypt(stored)).toBe(secret); // a new process derives the same key
    }
  });

  it('throws a SecretCipherError on a wrong key or a damaged value', () => {
    const stored = createSecretCipher('key one is long enough').encrypt(secret);
    const wrong = () => createSecretCipher('key two is long enough').decrypt(stored);
    expect(wrong).toThrow(SecretCipherError);
    expect(wrong).toThrow(/BOXRELAY_SECRETS_ENCRYPTION_KEY/);
    expect(catchCode(wrong)).toBe('secret_decrypt_failed');

    const [iv, tag, ciphertext] = stored.slice('enc:v1:'.length).split(':');
    const flipped = Buffer.from(ciphertext ?? '', 'base64');
    flipped[0] = (flipped[0] ?? 0) ^ 1;
    const tampered = `enc:v1:${iv}:${tag}:${flipped.toString('base64')}`;
    expect(catchCode(() => createSecretCipher('key one is long enough').decrypt(tampered))).toBe('secret_decrypt_failed');
    expect(catchCode(() => createSecretCipher('key one is long enough').decrypt('enc:v1:abc'))).toBe('secret_format_invalid');
    expect(catchCode(() => createSecretCipher(undefined).decrypt(stored))).toBe('secret_key_missing');
    expect(catchCode(() => createSecretCipher('base64:c2hvcnQ='))).toBe('secret_key_invalid');
  });

  it('passes plaintext through without a key, and reads plaintext rows with one', () => {
    for (const cipher of [createSecretCipher(undefined), createSecretCipher('  ')]) {
      expect(cipher.enabled).toBe(false);
      expect(cipher.encrypt(secret)).toBe(secret);
      expect(cipher.decrypt(secret)).toBe(secret);
    }
    const keyed = createSecretCipher('a passphrase');
    expect(keyed.enabled).toBe(true);
    expect(keyed.decrypt(secret)).toBe(secret);
  });
});

function catchCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return (error as { code?: string }).code;
  }
  return undefined;
}

/** A port with nothing listening: bind, note the port, close. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}
