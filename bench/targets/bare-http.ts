import { createServer } from 'node:http';
import { verifiesHmac } from '../deliveries.js';

/** Baseline (a): bare node:http, read the body, verify the HMAC, answer. The limit for Node here. */
const server = createServer((req, res) => {
  if (req.method !== 'POST' || req.url !== '/webhooks') {
    res.writeHead(404).end();
    return;
  }
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const ok = verifiesHmac(req.headers, Buffer.concat(chunks));
    const body = JSON.stringify(ok ? { ok, id: req.headers['x-service-delivery'], duplicate: false } : { ok });
    res.writeHead(ok ? 200 : 401, { 'content-type': 'application/json; charset=utf-8' }).end(body);
  });
});
server.listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)).closeAllConnections());
