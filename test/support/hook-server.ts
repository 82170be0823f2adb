import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type ServerOptions } from 'node:https';
import type { AddressInfo } from 'node:net';

export interface HookRequest {
  /** Wall-clock ms of arrival. */
  at: number;
  headers: IncomingHttpHeaders;
  body: string;
}

/** What the hook answers to the n-th request (0-based): a status (and headers), or `hang` (never answers). */
export type HookAnswer = number | { status: number; headers?: Record<string, string>; delayMs?: number } | 'hang';

export interface HookServer {
  url: string;
  requests: HookRequest[];
  /** Resolves once `count` requests have arrived. */
  received(count: number): Promise<HookRequest[]>;
  close(): Promise<void>;
}

/**
 * A real local HTTP server standing in for an outgoing hook's receiver; HTTPS with `tls` (with
 * `requestCert` and `rejectUnauthorized`, it takes only clients with a certificate its `ca` signed).
 */
export async function hookServer(answer: (request: HookRequest, index: number) => HookAnswer = () => 200, tls?: ServerOptions): Promise<HookServer> {
  const requests: HookRequest[] = [];
  const waiters: { count: number; resolve(requests: HookRequest[]): void }[] = [];
  const hanging: ServerResponse[] = [];
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request = { at: Date.now(), headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      const result = answer(request, requests.length);
      requests.push(request);
      for (const waiter of waiters.filter((w) => requests.length >= w.count)) waiter.resolve(requests);
      if (result === 'hang') return void hanging.push(res);
      const { status, headers = {}, delayMs = 0 } = typeof result === 'number' ? { status: result } : result;
      setTimeout(() => res.writeHead(status, headers).end(), delayMs);
    });
  };
  const server = tls ? createHttpsServer(tls, handle) : createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `${tls ? 'https' : 'http'}://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    requests,
    received: (count) =>
      requests.length >= count ? Promise.resolve(requests) : new Promise((resolve) => waiters.push({ count, resolve })),
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
