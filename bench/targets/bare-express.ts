import express from 'express';
import { verifiesHmac } from '../deliveries.js';

/** Baseline (b): the same verification as a bare Express route, no storage. The ceiling of an Express endpoint. */
const app = express();
app.disable('x-powered-by');
app.disable('etag');
app.post('/webhooks', express.raw({ type: () => true, limit: '256kb' }), (req, res) => {
  if (!verifiesHmac(req.headers, req.body as Buffer)) return void res.status(401).json({ ok: false });
  res.json({ ok: true, id: req.headers['x-service-delivery'], duplicate: false });
});
const server = app.listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)).closeAllConnections());
