import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type ServerOptions } from 'node:https';
import type { AddressInfo } from 'node:net';
import pTimeout from 'p-timeout';

export interface HookRequest {
  /** Wall-clock ms of arrival. */
  at: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * What the hook answers to the n-th request (0-based): a status (and headers), or `hang` (never
 * answers); `until`: held open until it settles (a test lets it go when it has done what it races).
 */
export type HookAnswer = number | { status: number; headers?: Record<string, string>; delayMs?: number; until?: Promise<unknown> } | 'hang';

export interface HookServer {
  url: string;
  requests: HookRequest[];
  /**
   * Resolves once `count` requests have arrived (rejects after `timeoutMs`), and makes `count` the
   * exact total this server expects: `close()`, run after the relays that send to it have stopped
   * (the fixture closes them first), fails when more arrived, so a late duplicate is never missed.
   */
  received(count: number, timeoutMs?: number): Promise<HookRequest[]>;
  /** The same wait, for a test where more may follow (at-least-once after a crash): no exact total. */
  receivedAtLeast(count: number, timeoutMs?: number): Promise<HookRequest[]>;
  /** The most requests this server held unanswered at once: what a sender had in flight, counted where they arrive. */
  readonly mostInFlight: number;
  close(): Promise<void>;
}

const RECEIVE_TIMEOUT_MS = 15_000;

/**
 * A real local HTTP server standing in for an outgoing hook's receiver; HTTPS with `tls` (with
 * `requestCert` and `rejectUnauthorized`, it takes only clients with a certificate its `ca` signed).
 */
export async function hookServer(answer: (request: HookRequest, index: number) => HookAnswer = () => 200, tls?: ServerOptions): Promise<HookServer> {
  const requests: HookRequest[] = [];
  const waiters: { count: number; resolve(requests: HookRequest[]): void }[] = [];
  const hanging: ServerResponse[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    mostInFlight = Math.max(mostInFlight, ++inFlight);
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = { at: Date.now(), headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      const result = answer(request, requests.length);
      requests.push(request);
      for (const waiter of waiters.filter((w) => requests.length >= w.count)) waiter.resolve(requests);
      if (result === 'hang') return void hanging.push(res);
      const { status, headers = {}, delayMs = 0, until } = typeof result === 'number' ? { status: result } : result;
      void Promise.resolve(until).then(() =>
        setTimeout(() => {
          // Before the answer leaves: a request sent after it can only arrive once this one is counted out.
          inFlight--;
          res.writeHead(status, headers).end();
        }, delayMs),
      );
    });
  };
  const server = tls ? createHttpsServer(tls, handle) : createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  /** The exact number of requests the test last said it expects (by `received`); undefined: any. */
  let expected: number | undefined;
  const atLeast = (count: number, timeoutMs = RECEIVE_TIMEOUT_MS): Promise<HookRequest[]> =>
    requests.length >= count
      ? Promise.resolve(requests)
      : pTimeout(new Promise<HookRequest[]>((resolve) => waiters.push({ count, resolve })), {
          milliseconds: timeoutMs,
          fallback: () => Promise.reject(new Error(`the hook expected ${count} requests within ${timeoutMs} ms, got ${requests.length}`)),
        });
  return {
    url: `${tls ? 'https' : 'http'}://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    requests,
    get mostInFlight() {
      return mostInFlight;
    },
    received(count, timeoutMs) {
      expected = count;
      return atLeast(count, timeoutMs);
    },
    receivedAtLeast(count, timeoutMs) {
      expected = undefined;
      return atLeast(count, timeoutMs);
    },
    async close() {
      await new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      });
      if (expected !== undefined && requests.length !== expected) {
        throw new Error(`the hook expected exactly ${expected} requests, got ${requests.length}: ${requests.length > expected ? 'more arrived later (a duplicate?)' : 'fewer'}`);
      }
    },
  };
}
