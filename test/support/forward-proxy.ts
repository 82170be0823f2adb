import { createServer, request as httpRequest } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';

/** What passed through the proxy: an absolute-form request (`http://host:port/path`) or a CONNECT tunnel (`host:port`). */
export interface Proxied {
  method: string;
  target: string;
  /** Proxy-Authorization as sent, if any. */
  authorization: string | undefined;
}

export interface ForwardProxy {
  url: string;
  passed: Proxied[];
  close(): Promise<void>;
}

/**
 * A forward proxy of the test's own: absolute-form HTTP requests are forwarded to their target, a
 * CONNECT opens a TCP tunnel (HTTPS goes through it); every one is recorded.
 */
export async function forwardProxy(): Promise<ForwardProxy> {
  const passed: Proxied[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    passed.push({ method: req.method ?? '', target: req.url ?? '', authorization: req.headers['proxy-authorization'] });
    const target = new URL(req.url ?? '');
    const headers = { ...req.headers };
    delete headers['proxy-authorization'];
    delete headers['proxy-connection'];
    const upstream = httpRequest(target, { method: req.method, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  server.on('connect', (req, client: Socket, head: Buffer) => {
    passed.push({ method: 'CONNECT', target: req.url ?? '', authorization: req.headers['proxy-authorization'] });
    const [host, port] = (req.url ?? '').split(/:(?=\d+$)/);
    const tunnel = connect(Number(port), host as string, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      tunnel.write(head);
      tunnel.pipe(client);
      client.pipe(tunnel);
    });
    sockets.add(tunnel).add(client);
    const end = () => {
      tunnel.destroy();
      client.destroy();
    };
    tunnel.on('error', end).on('close', end);
    client.on('error', end).on('close', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    passed,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
