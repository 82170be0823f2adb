import { createServer, connect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface SlowTcp {
  /** The port on 127.0.0.1 that forwards to the target. */
  port: number;
  /** Each answer from the target reaches the client this long after it came (in order). */
  delayMs: number;
  close(): Promise<void>;
}

/**
 * A TCP proxy on a free port of 127.0.0.1 whose answers come `delayMs` late, in order: a database
 * that answers slowly, every round trip, whatever the statement.
 */
export async function slowTcp(targetPort: number, delayMs: number): Promise<SlowTcp> {
  const sockets = new Set<Socket>();
  const proxy: SlowTcp = { port: 0, delayMs, close: async () => {} };
  const server = createServer((client) => {
    const target = connect(targetPort, '127.0.0.1');
    sockets.add(client).add(target);
    client.pipe(target);
    // Each chunk from the target is held for the delay; the timers keep their order.
    target.on('data', (chunk) => setTimeout(() => client.writable && client.write(chunk), proxy.delayMs));
    target.on('end', () => setTimeout(() => client.end(), proxy.delayMs));
    const close = () => {
      client.destroy();
      target.destroy();
    };
    client.on('error', close).on('close', close);
    target.on('error', close).on('close', () => setTimeout(close, proxy.delayMs));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.port = (server.address() as AddressInfo).port;
  proxy.close = () =>
    new Promise<void>((resolve) => {
      for (const socket of sockets) socket.destroy();
      server.close(() => resolve());
    });
  return proxy;
}
