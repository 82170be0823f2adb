import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { listen, type Listening } from '../src/http/listen.js';

/**
 * Slow clients are cut when the limits say: Node checks them only every `connectionsCheckingInterval`
 * (30 s by default), so a header limit of 10 s cut trickling clients at 30 s.
 */
const LIMITS = { headersTimeoutMs: 600, requestTimeoutMs: 1200 };
/** Far below Node's default 30 s check, far above the limits: what a cut within the limits must beat. */
const CUT_WITHIN_MS = 5000;

let server: Listening | undefined;
afterEach(async () => {
  await server?.close(0);
  server = undefined;
});

/** Writes `chunks` one every 100 ms until the server closes the connection; resolves with when it did, and what it answered. */
async function trickle(port: number, head: string, chunks: string[]): Promise<{ closedAfterMs: number; answer: string }> {
  const socket: Socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const started = performance.now();
  let answer = '';
  socket.on('data', (data: Buffer) => (answer += data.toString('latin1')));
  // Node 24 closes with a reset when the client's unread bytes are still queued: still a close (events.once would reject on it).
  socket.on('error', () => {});
  const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(performance.now() - started)));
  socket.write(head);
  const writer = setInterval(() => {
    const chunk = chunks.shift();
    if (chunk !== undefined && !socket.destroyed) socket.write(chunk);
  }, 100);
  try {
    return { closedAfterMs: await closed, answer };
  } finally {
    clearInterval(writer);
  }
}

describe('slow clients', () => {
  it('cuts a client trickling its headers at the header limit, not at the next 30 s check', async () => {
    server = await listen((_req, res) => res.end('ok'), 0, '127.0.0.1', LIMITS);
    const { closedAfterMs, answer } = await trickle(server.port, 'POST /webhooks HTTP/1.1\r\nHost: relay\r\n', Array(400).fill('X-Slow: 1\r\n'));
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
    expect(closedAfterMs).toBeGreaterThanOrEqual(LIMITS.headersTimeoutMs);
    expect(closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
  });

  it('cuts a client trickling its body at the request limit', async () => {
    server = await listen((req, res) => req.resume().on('end', () => res.end('ok')), 0, '127.0.0.1', LIMITS);
    const { closedAfterMs, answer } = await trickle(server.port, 'POST /webhooks HTTP/1.1\r\nHost: relay\r\nContent-Length: 1000\r\n\r\n', Array(400).fill('x'));
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
    expect(closedAfterMs).toBeGreaterThanOrEqual(LIMITS.requestTimeoutMs);
    expect(closedAfterMs).toBeLessThan(CUT_WITHIN_MS);
  });
});
