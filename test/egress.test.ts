import { readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../src/config/load.js';
import { proxyFor } from '../src/egress/dispatcher.js';
import { noProxyMatcher } from '../src/egress/no-proxy.js';
import { proxyEnvOf } from '../src/egress/proxy-env.js';
import { createUpstreamClient } from '../src/upstream/client.js';
import { testCertificates, type TestCertificates } from './support/certificates.js';
import { startFakeSandbox } from './support/fake-sandbox.js';
import { ADMIN_TOKEN, adminAuth, allDelivered, fanoutFixture, hook, outboxRows } from './support/fanout-relay.js';
import { waitFor } from './support/fanout.js';
import { forwardProxy, type ForwardProxy } from './support/forward-proxy.js';
import { runCli } from './support/process.js';
import { SECRET, delivery, sendRaw } from './support/sign.js';
import { sqliteFile } from './support/databases.js';
import request from 'supertest';

describe('NO_PROXY (curl rules)', () => {
  const cases: [list: string, host: string, bypass: boolean][] = [
    ['example.com', 'example.com', true],
    ['example.com', 'api.example.com', true],
    ['example.com', 'notexample.com', false],
    ['.example.com', 'example.com', true],
    ['.example.com', 'a.b.example.com', true],
    ['*.example.com', 'api.example.com', true],
    ['Example.COM', 'api.example.com', true],
    ['example.com.', 'API.Example.com', true],
    ['example.com', 'example.com.', true],
    ['example.com', 'example.org', false],
    ['10.1.2.3', '10.1.2.3', true],
    ['10.1.2.3', '10.1.2.4', false],
    ['10.0.0.0/8', '10.200.3.4', true],
    ['10.0.0.0/8', '11.0.0.1', false],
    ['192.168.1.0/24', '192.168.1.77', true],
    ['192.168.1.0/24', '192.168.2.1', false],
    ['fd00::/8', '[fd12::1]', true],
    ['fd00::/8', '[fe80::1]', false],
    ['::1', '[::1]', true],
    ['[::1]', '[::1]', true],
    ['*', 'anything.example', true],
    ['*', '10.0.0.1', true],
    // Loopback is proxied like any other host unless listed.
    ['', '127.0.0.1', false],
    ['', 'localhost', false],
    ['example.com', '127.0.0.1', false],
    ['localhost', 'localhost', true],
    ['localhost', '127.0.0.1', false],
    ['127.0.0.0/8', '127.0.0.1', true],
    // An IP entry is an address, not a name suffix.
    ['0.0.1', '10.0.0.1', false],
    // Commas and spaces both separate.
    ['a.example, b.example  10.0.0.0/8', 'b.example', true],
    ['a.example, b.example  10.0.0.0/8', '10.9.9.9', true],
  ];
  for (const [list, host, bypass] of cases) {
    it(`${JSON.stringify(list)} ${bypass ? 'bypasses' : 'proxies'} ${host}`, () => {
      expect(noProxyMatcher(list)(host)).toBe(bypass);
    });
  }

  it('reads each variable in lower or upper case, lower case winning when both are set', () => {
    expect(proxyEnvOf({ HTTPS_PROXY: 'http://upper:1', https_proxy: 'http://lower:1', HTTP_PROXY: 'http://h:1', NO_PROXY: 'a', no_proxy: 'b' })).toEqual({
      httpsProxy: 'http://lower:1',
      httpProxy: 'http://h:1',
      noProxy: 'b',
    });
    expect(proxyEnvOf({ http_proxy: 'http://lower:2', no_proxy: '10.0.0.0/8' })).toEqual({ httpProxy: 'http://lower:2', httpsProxy: undefined, noProxy: '10.0.0.0/8' });
    expect(proxyEnvOf({})).toEqual({ httpProxy: undefined, httpsProxy: undefined, noProxy: undefined });
    // Without a scheme, an HTTP proxy (as curl takes it).
    expect(proxyEnvOf({ HTTPS_PROXY: 'proxy.corp:3128' }).httpsProxy).toBe('http://proxy.corp:3128');
  });

  it('refuses a proxy variable that is not an http(s) URL, naming the variable and not the value (exit 2)', () => {
    const problems = (env: Record<string, string>): string[] => {
      try {
        loadConfig({ env });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as ConfigError).problems;
      }
      return [];
    };
    expect(problems({ https_proxy: 'socks5://user:secret@proxy:1080', HTTP_PROXY: 'http://[bad' })).toEqual([
      'HTTPS_PROXY (or https_proxy): expected a proxy URL such as http://proxy.example:3128 (the value is not shown)',
      'HTTP_PROXY (or http_proxy): expected a proxy URL such as http://proxy.example:3128 (the value is not shown)',
    ]);
    expect(loadConfig({ env: { HTTPS_PROXY: 'http://user:secret@proxy.corp:3128', no_proxy: '*' } }).proxyEnv).toEqual({
      httpsProxy: 'http://user:secret@proxy.corp:3128',
      httpProxy: undefined,
      noProxy: '*',
    });
  });

  it('takes the proxy of the URL scheme, the hook own proxy over the variables, and none for direct', () => {
    const env = { httpProxy: 'http://plain:1', httpsProxy: 'http://secure:1', noProxy: 'internal.example' };
    expect(proxyFor({ kind: 'env', env }, new URL('http://hooks.example/x'))).toBe('http://plain:1');
    expect(proxyFor({ kind: 'env', env }, new URL('https://hooks.example/x'))).toBe('http://secure:1');
    expect(proxyFor({ kind: 'env', env }, new URL('https://a.internal.example/x'))).toBeUndefined();
    expect(proxyFor({ kind: 'env', env: { httpProxy: 'http://plain:1' } }, new URL('https://hooks.example/x'))).toBeUndefined();
    expect(proxyFor({ kind: 'proxy', url: 'http://own:1' }, new URL('https://a.internal.example/x'))).toBe('http://own:1');
    expect(proxyFor({ kind: 'direct' }, new URL('https://hooks.example/x'))).toBeUndefined();
  });
});

describe('hooks and the upstream API through proxies, and TLS per hook', () => {
  const { defer, server, relay, serve } = fanoutFixture();
  let certs: TestCertificates | undefined;
  afterAll(() => certs && rm(certs.dir, { recursive: true, force: true }));
  /** Made once for the file (openssl takes a moment), removed after it. */
  const certificates = () => (certs ??= testCertificates());
  const proxy = async (): Promise<ForwardProxy> => {
    const p = await forwardProxy();
    defer(() => p.close());
    return p;
  };
  /** An HTTPS receiver whose certificate the test CA signed; with `mutual`, it takes only clients with a certificate the CA signed. */
  const httpsServer = (mutual: boolean) => {
    const c = certificates();
    return server(() => 200, {
      cert: readFileSync(c.cert),
      key: readFileSync(c.key),
      ...(mutual ? { ca: readFileSync(c.ca), requestCert: true, rejectUnauthorized: true } : {}),
    });
  };
  const port = (url: string) => new URL(url).port;

  it('sends an http hook through HTTP_PROXY as an absolute-form request, an https one through HTTPS_PROXY by CONNECT', async () => {
    const plainProxy = await proxy();
    const secureProxy = await proxy();
    const plain = await server();
    const secure = await httpsServer(false);
    const t = await relay({
      proxyEnv: { httpProxy: plainProxy.url, httpsProxy: secureProxy.url },
      hooks: [hook('plain', plain.url), hook('secure', secure.url, { tls: { ca: certificates().ca } })],
    });
    const posted = await t.post();
    await plain.received(1);
    await secure.received(1);
    expect(plainProxy.passed).toEqual([{ method: 'POST', target: plain.url, authorization: undefined }]);
    expect(secureProxy.passed).toEqual([{ method: 'CONNECT', target: `127.0.0.1:${port(secure.url)}`, authorization: undefined }]);
    expect(secure.requests[0]!.headers['webhook-id']).toBe(posted.deliveryId);
    await allDelivered(t, 'plain');
    await allDelivered(t, 'secure');
  });

  it('proxies loopback unless NO_PROXY lists it; proxy: <url> overrides the variables and proxy: direct bypasses them', async () => {
    const envProxy = await proxy();
    const ownProxy = await proxy();
    const [a, b, c, d] = [await server(), await server(), await server(), await server()];
    // NO_PROXY lists other hosts: loopback goes through the proxy.
    const unlisted = await relay({
      proxyEnv: { httpProxy: envProxy.url, noProxy: '10.0.0.0/8,example.com' },
      hooks: [hook('proxied', a.url), hook('straight', b.url, { proxy: 'direct' })],
    });
    await unlisted.post();
    await a.received(1);
    await b.received(1);
    expect(envProxy.passed.map((p) => p.target)).toEqual([a.url]);

    // NO_PROXY lists loopback as a CIDR: straight, unless the hook names its own proxy (with credentials).
    const listed = await relay({
      proxyEnv: { httpProxy: envProxy.url, noProxy: '127.0.0.0/8' },
      hooks: [hook('listed', c.url), hook('own', d.url, { proxy: `http://relay:pa%20ss@127.0.0.1:${port(ownProxy.url)}` })],
    });
    await listed.post();
    await c.received(1);
    await d.received(1);
    expect(envProxy.passed.map((p) => p.target)).toEqual([a.url]);
    expect(ownProxy.passed).toEqual([{ method: 'POST', target: d.url, authorization: `Basic ${Buffer.from('relay:pa ss').toString('base64')}` }]);
  });

  it('delivers with mutual TLS against a private CA; without the client certificate, or trusting another CA, it fails and retries', async () => {
    const c = certificates();
    const receiver = await httpsServer(true);
    const t = await relay({
      hooks: [
        hook('mutual', receiver.url, { tls: { ca: c.ca, cert: c.clientCert, key: c.clientKey } }),
        hook('anonymous', receiver.url, { tls: { ca: c.ca }, maxAttempts: 100 }),
        hook('untrusting', receiver.url, { tls: { ca: c.otherCa, cert: c.clientCert, key: c.clientKey }, maxAttempts: 100 }),
      ],
    });
    const posted = await t.post();
    await allDelivered(t, 'mutual');
    await waitFor(async () => (await outboxRows(t, 'anonymous'))[0]?.last_error != null, 'the attempt without a client certificate to fail');
    await waitFor(async () => (await outboxRows(t, 'untrusting'))[0]?.last_error != null, 'the attempt trusting another CA to fail');
    // Only the hook with the client certificate got through to the receiver.
    expect(receiver.requests.map((r) => r.headers['webhook-id'])).toEqual([posted.deliveryId]);
    const [anonymous] = await outboxRows(t, 'anonymous');
    const [untrusting] = await outboxRows(t, 'untrusting');
    expect(anonymous).toMatchObject({ status: 'pending' });
    expect(anonymous!.last_error).toMatch(/^connection_error: /);
    expect(untrusting).toMatchObject({ status: 'pending' });
    // The receiver's certificate does not chain to the CA the hook trusts.
    expect(untrusting!.last_error).toMatch(/^connection_error: (SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE)$/);
  });

  it('reaches an HTTPS receiver by CONNECT through HTTPS_PROXY with mutual TLS end to end', async () => {
    const c = certificates();
    const p = await proxy();
    const receiver = await httpsServer(true);
    const t = await relay({ proxyEnv: { httpsProxy: p.url }, hooks: [hook('mutual', receiver.url, { tls: { ca: c.ca, cert: c.clientCert, key: c.clientKey } })] });
    await t.post();
    await allDelivered(t, 'mutual');
    expect(p.passed).toEqual([{ method: 'CONNECT', target: `127.0.0.1:${port(receiver.url)}`, authorization: undefined }]);
    expect(receiver.requests).toHaveLength(1);
  });

  it('calls the upstream API through HTTP_PROXY, and straight when NO_PROXY lists its host', async () => {
    const p = await proxy();
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    upstream.setBox({ id: 'bx_1', name: 'one', state: 'ready', updatedAt: '2026-01-01T00:00:00Z' });
    const proxied = createUpstreamClient({ baseUrl: upstream.baseUrl, apiKey: upstream.apiKey, proxyEnv: { httpProxy: p.url } });
    expect((await proxied.listBoxes()).items.map((b) => b.id)).toEqual(['bx_1']);
    expect(p.passed).toEqual([{ method: 'GET', target: `${upstream.baseUrl}/boxes?limit=200`, authorization: undefined }]);
    const straight = createUpstreamClient({ baseUrl: upstream.baseUrl, apiKey: upstream.apiKey, proxyEnv: { httpProxy: p.url, noProxy: '127.0.0.1' } });
    expect((await straight.listBoxes()).items).toHaveLength(1);
    expect(p.passed).toHaveLength(1);
    expect(upstream.requests).toHaveLength(2);
  });

  it('`boxrelay serve` reads https_proxy/HTTP_PROXY from its environment for hooks (fan-out worker) and reconciliation', async () => {
    const p = await proxy();
    const ignored = await proxy();
    const receiver = await server();
    const upstream = await startFakeSandbox();
    defer(() => upstream.close());
    const hooksFile = join(certificates().dir, 'hooks.yaml');
    writeFileSync(hooksFile, JSON.stringify([{ name: 'all', url: receiver.url }]));
    const relayProcess = await serve({
      BOXRELAY_SECRETS: SECRET,
      BOXRELAY_DATABASE: sqliteFile(),
      BOXRELAY_HOOKS_FILE: hooksFile,
      BOXRELAY_ADMIN_TOKEN: ADMIN_TOKEN,
      BOXRELAY_UPSTREAM_BASE_URL: upstream.baseUrl,
      BOXRELAY_UPSTREAM_API_KEY: upstream.apiKey,
      BOXRELAY_RECONCILE_INTERVAL: 'off',
      // Lower case wins over upper case.
      http_proxy: p.url,
      HTTP_PROXY: ignored.url,
    });
    const d = delivery({ timestamp: Math.floor(Date.now() / 1000) });
    const answer = await sendRaw(request(`http://127.0.0.1:${relayProcess.port}`).post('/webhooks').set(d.headers), d.body);
    expect(answer.status).toBe(200);
    await receiver.received(1);
    const run = await request(`http://127.0.0.1:${relayProcess.internalPort}`).post('/admin/reconcile').set(adminAuth);
    expect(run.status).toBe(202);
    await waitFor(async () => p.passed.some((x) => x.target.startsWith(`${upstream.baseUrl}/boxes`)), 'the run to list boxes through the proxy');
    expect(p.passed[0]).toEqual({ method: 'POST', target: receiver.url, authorization: undefined });
    expect(ignored.passed).toEqual([]);
  });

  describe('configuration errors name the hook (exit 2)', () => {
    const load = (hooks: unknown[]) => {
      const file = join(certificates().dir, `hooks-${Math.random().toString(36).slice(2)}.yaml`);
      writeFileSync(file, JSON.stringify(hooks));
      try {
        loadConfig({ env: { BOXRELAY_HOOKS_FILE: file } });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        return (error as ConfigError).problems;
      }
      throw new Error('the configuration was accepted');
    };

    it('refuses an unreadable file, a CA file without a certificate, a certificate without its key and a key of another certificate', () => {
      const c = certificates();
      const notPem = join(c.dir, 'not-pem.txt');
      writeFileSync(notPem, 'hello\n');
      const url = 'https://hooks.example/x';
      expect(load([{ name: 'missing', url, tls: { ca: join(c.dir, 'nope.pem') } }])).toEqual([`hook missing: tls.ca (${join(c.dir, 'nope.pem')}): cannot read (ENOENT)`]);
      expect(load([{ name: 'garbage', url, tls: { ca: notPem } }])).toEqual([`hook garbage: tls.ca (${notPem}): holds no PEM certificate`]);
      expect(load([{ name: 'half', url, tls: { cert: c.clientCert } }])).toEqual(['hook half: tls.cert and tls.key go together (a client certificate and its private key)']);
      const [mismatch] = load([{ name: 'mismatch', url, tls: { cert: c.clientCert, key: c.key } }]);
      expect(mismatch).toMatch(/^hook mismatch: tls\.cert and tls\.key: not a PEM certificate and its private key/);
      expect(load([{ name: 'badproxy', url, proxy: 'socks5://127.0.0.1:1080' }])).toEqual(['hooks file: hooks.0.proxy: hook badproxy: proxy is "direct" or an http:// or https:// proxy URL']);
      const fine = join(c.dir, 'hooks-fine.yaml');
      writeFileSync(fine, JSON.stringify([{ name: 'fine', url, tls: { ca: c.ca, cert: c.clientCert, key: c.clientKey }, proxy: 'direct' }]));
      expect(loadConfig({ env: { BOXRELAY_HOOKS_FILE: fine } }).hooks[0]).toMatchObject({ name: 'fine', proxy: 'direct' });
    });

    it('`boxrelay serve` exits 2 on an unreadable TLS file, naming the hook', async () => {
      const file = join(certificates().dir, 'hooks-bad-tls.yaml');
      writeFileSync(file, JSON.stringify([{ name: 'private', url: 'https://hooks.example/x', tls: { ca: '/nonexistent/ca.pem' } }]));
      const result = await runCli(['serve'], { BOXRELAY_SECRETS: SECRET, BOXRELAY_DATABASE: sqliteFile(), BOXRELAY_HOOKS_FILE: file, PORT: '0', BOXRELAY_INTERNAL_PORT: '0' });
      expect(result.code).toBe(2);
      expect(result.stderr).toContain('hook private: tls.ca (/nonexistent/ca.pem): cannot read (ENOENT)');
    });
  });
});
