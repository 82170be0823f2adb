import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { hookSchema } from '../src/config/schema.js';
import { SinkFailure } from '../src/sinks/failures.js';
import { createHttpHookSink } from '../src/sinks/http-hook.js';
import type { Exchange } from '../src/sinks/sink.js';
import { ManualClock } from './support/clock.js';
import { cloudEvent } from './support/cloud-event.js';

const event = { ...cloudEvent({}, 'box.ready'), id: 'evt_body_1' };

const servers: Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** A receiver run by `handle`; resolves with its URL. */
async function receiver(handle: (req: IncomingMessage, res: ServerResponse) => void): Promise<string> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => handle(req, res));
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
}

/** One attempt's exchange, whether it was delivered or failed. */
async function attempt(url: string, extra: Record<string, unknown> = {}): Promise<{ exchange: Exchange | undefined; failure?: SinkFailure }> {
  const sink = createHttpHookSink({ hook: hookSchema.parse({ name: 'receiver', url, ...extra }), clock: new ManualClock() });
  try {
    const sent = await sink.deliver(event, new AbortController().signal);
    if (sent === 'skipped') throw new Error('a hook without a transform never skips');
    return { exchange: sent ?? undefined };
  } catch (error) {
    if (!(error instanceof SinkFailure)) throw error;
    return { exchange: error.exchange, failure: error };
  } finally {
    await sink.close();
  }
}

const MB = 1024 * 1024;

describe('a hook answer kept with its attempt', () => {
  it('a 100 MB answer costs 4096 bytes kept: the rest is never read and the connection is closed', async () => {
    let written = 0;
    let closed!: () => void;
    const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
    const url = await receiver((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(100 * MB), 'x-receiver': 'big' });
      const chunk = Buffer.alloc(64 * 1024, 'a');
      const pump = () => {
        while (written < 100 * MB && !res.destroyed) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once('drain', pump);
        }
        res.end();
      };
      res.on('close', closed);
      pump();
    });
    const { exchange, failure } = await attempt(url);
    expect(failure).toBeUndefined();
    expect(exchange?.status).toBe(200);
    expect(exchange?.response?.body).toBe('a'.repeat(4096));
    expect(exchange?.response?.bodyTruncated).toBe(true);
    expect(exchange?.response?.headers['x-receiver']).toBe('big');
    await connectionClosed;
    // What the receiver could push before the relay hung up: socket buffers, not 100 MB.
    expect(written).toBeLessThan(20 * MB);
  });

  it('a body that drips ends with the attempt timeout, keeping what came, marked cut', async () => {
    let closed!: () => void;
    const connectionClosed = new Promise<void>((resolve) => (closed = resolve));
    const timers: NodeJS.Timeout[] = [];
    const url = await receiver((_req, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.write('slow');
      // One byte every 20 ms, for ever: only the hook's timeout ends it.
      timers.push(setInterval(() => res.write('.'), 20));
      res.on('close', () => {
        timers.forEach(clearInterval);
        closed();
      });
    });
    const { exchange, failure } = await attempt(url, { timeoutMs: 300 });
    // The status came before the body stalled: it decides (a 500 is retried).
    expect(failure?.code).toBe('http_500');
    expect(exchange?.status).toBe(500);
    expect(exchange?.response?.body).toMatch(/^slow\.*$/);
    expect(exchange?.response?.bodyTruncated).toBe(true);
    await connectionClosed;
  });

  it('keeps a short body whole, and the request with extra headers redacted and no signature', async () => {
    const url = await receiver((_req, res) => res.writeHead(202, { 'content-type': 'text/html' }).end('<script>alert(1)</script>'));
    const { exchange } = await attempt(url, { headers: { Authorization: 'Bearer s3cret', 'X-Team': 'ops' }, secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' });
    expect(exchange?.response).toEqual({ headers: expect.objectContaining({ 'content-type': 'text/html' }), body: '<script>alert(1)</script>', bodyTruncated: false });
    expect(exchange?.request.url).toBe(url);
    expect(exchange?.request.headers).toMatchObject({ authorization: '[redacted]', 'x-team': '[redacted]', 'webhook-id': 'evt_body_1', 'content-type': 'application/cloudevents+json' });
    expect(exchange?.request.headers).not.toHaveProperty('webhook-signature');
    expect(JSON.stringify(exchange)).not.toContain('s3cret');
  });

  it('a refused connection has the request and no response', async () => {
    const url = await receiver(() => {});
    servers[0]!.close();
    servers[0]!.closeAllConnections();
    const { exchange, failure } = await attempt(url);
    expect(failure?.code).toBe('connection_error');
    expect(exchange).toMatchObject({ status: null, response: null, request: { url } });
  });
});
