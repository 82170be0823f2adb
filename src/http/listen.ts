import { createServer, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { Server as NetServer, type AddressInfo } from 'node:net';

/**
 * How long, at shutdown, an idle keep-alive connection may still bring a request (answered, with
 * `Connection: close`) before it is closed: a client may have sent one just before the signal.
 */
const IDLE_GRACE_MS = 1000;

export interface Listening {
  server: Server;
  port: number;
  /**
   * Stops accepting, answers what is in flight or arrives within a short grace on open connections
   * (each with `Connection: close`), closes idle ones, and cuts what is left after `graceMs`.
   */
  close(graceMs: number): Promise<void>;
}

/**
 * A server with slow-client limits: a peer cannot hold a connection open by trickling headers or a
 * body. Idle keep-alive outlasts the usual 60 s of load balancers, which would otherwise reuse a
 * connection the server is closing and answer 502.
 */
export async function listen(handler: RequestListener, port: number, host: string): Promise<Listening> {
  const server = createServer(
    { maxHeaderSize: 16 * 1024, headersTimeout: 10_000, requestTimeout: 30_000, keepAliveTimeout: 65_000 },
    handler,
  );
  // Responses still being worked on when shutdown starts close their connection once sent, so the
  // server does not wait out keep-alive timeouts of clients it has already answered.
  const inFlight = new Set<ServerResponse>();
  let closing = false;
  // Prepended: it must run before the app, which may answer at once.
  server.prependListener('request', (_req, res: ServerResponse) => {
    inFlight.add(res);
    res.once('close', () => inFlight.delete(res));
    if (closing) res.setHeader('Connection', 'close');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    server,
    port: (server.address() as AddressInfo).port,
    close: (graceMs) =>
      new Promise<void>((resolve) => {
        closing = true;
        for (const res of inFlight) if (!res.headersSent) res.setHeader('Connection', 'close');
        const idleTimer = setTimeout(() => server.closeIdleConnections(), Math.min(IDLE_GRACE_MS, graceMs));
        const timer = setTimeout(() => server.closeAllConnections(), graceMs);
        // Node's http close() would destroy idle keep-alive connections at once, resetting a request
        // already sent on one but not read yet: only the listening socket is closed here.
        NetServer.prototype.close.call(server, () => {
          clearTimeout(idleTimer);
          clearTimeout(timer);
          resolve();
        });
      }),
  };
}
