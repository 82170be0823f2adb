import { createServer, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { Server as NetServer, type AddressInfo } from 'node:net';

/**
 * How long, at shutdown, an idle keep-alive connection may still bring a request (answered, with
 * `Connection: close`) before it is closed: a client may have sent one just before the signal.
 */
const IDLE_GRACE_MS = 1000;

/**
 * At shutdown the listener keeps accepting this long before it looks for a quiet moment to close:
 * clients that connected with the signal (a burst still reaching the kernel's queue) are served, not reset.
 */
const SETTLE_MS = 20;

/** While connections keep arriving at shutdown, how long to wait before looking again for a quiet moment to stop listening. */
const QUIET_RETRY_MS = 20;

export interface Listening {
  server: Server;
  port: number;
  /** Shutdown has begun: keep serving, but every answer from now on closes its connection (`Connection: close`). */
  drain(): void;
  /**
   * Stops accepting (at a moment when no connection waits to be accepted), answers what is in
   * flight or arrives within a short grace on open connections (each with `Connection: close`),
   * closes idle ones, and cuts what is left after `graceMs`.
   */
  close(graceMs: number): Promise<void>;
}

/** How long a client may take to send its headers, and its whole request. */
export interface SlowClientLimits {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
}

export const SLOW_CLIENT_LIMITS: SlowClientLimits = { headersTimeoutMs: 10_000, requestTimeoutMs: 30_000 };

/**
 * A server with slow-client limits: a peer cannot hold a connection open by trickling headers or a
 * body. Node checks the limits every `connectionsCheckingInterval` (30 s by default, so a 10 s
 * header limit cut at 30 s): checked often enough, the effective limits are the configured ones.
 * Idle keep-alive outlasts the usual 60 s of load balancers, which would otherwise reuse a
 * connection the server is closing and answer 502.
 */
export async function listen(handler: RequestListener, port: number, host: string, limits: SlowClientLimits = SLOW_CLIENT_LIMITS): Promise<Listening> {
  const server = createServer(
    {
      maxHeaderSize: 16 * 1024,
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, limits.headersTimeoutMs / 4),
      keepAliveTimeout: 65_000,
    },
    handler,
  );
  // Responses still being worked on when shutdown starts close their connection once sent, so
  // clients move to other replicas and the server does not wait out keep-alive timeouts.
  const inFlight = new Set<ServerResponse>();
  let draining = false;
  let accepted = 0;
  server.on('connection', () => accepted++);
  // Prepended: it must run before the app, which may answer at once.
  server.prependListener('request', (_req, res: ServerResponse) => {
    inFlight.add(res);
    res.once('close', () => inFlight.delete(res));
    if (draining) res.setHeader('Connection', 'close');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const drain = () => {
    draining = true;
    for (const res of inFlight) if (!res.headersSent) res.setHeader('Connection', 'close');
  };
  return {
    server,
    port: (server.address() as AddressInfo).port,
    drain,
    close: (graceMs) =>
      new Promise<void>((resolve) => {
        drain();
        let idleTimer: NodeJS.Timeout | undefined;
        const timer = setTimeout(() => server.closeAllConnections(), graceMs);
        const stopListening = () => {
          idleTimer = setTimeout(() => server.closeIdleConnections(), Math.min(IDLE_GRACE_MS, graceMs));
          // Node's http close() would destroy idle keep-alive connections at once, resetting a request
          // already sent on one but not read yet: only the listening socket is closed here.
          NetServer.prototype.close.call(server, () => {
            clearTimeout(idleTimer);
            clearTimeout(timer);
            resolve();
          });
        };
        // Closing the listening socket resets the connections the kernel has queued but the server
        // not yet accepted. Each poll of the event loop accepts all that wait, so the socket is
        // closed right after a poll (setImmediate) that brought no new connection.
        const deadline = Date.now() + graceMs;
        const closeAfterQuietPoll = () => {
          const before = accepted;
          setImmediate(() => {
            if (accepted === before || Date.now() >= deadline) stopListening();
            else setTimeout(closeAfterQuietPoll, QUIET_RETRY_MS);
          });
        };
        setTimeout(closeAfterQuietPoll, SETTLE_MS);
      }),
  };
}
