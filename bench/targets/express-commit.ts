import Database from 'better-sqlite3';
import express from 'express';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifiesHmac } from '../deliveries.js';

/**
 * Baseline (c): baseline (b) plus the least any durable receiver must do: the deliveries that arrive
 * in one event-loop turn go into one SQLite table (id key, raw body) in one transaction, one fsync
 * (WAL, synchronous=FULL), and each answer waits for that commit. No other index, no fan-out.
 */
const dir = mkdtempSync(join(tmpdir(), 'bench-commit-'));
const db = new Database(join(dir, 'c.db'));
db.pragma('journal_mode = WAL');
db.pragma('synchronous = FULL');
db.exec('CREATE TABLE deliveries (id TEXT PRIMARY KEY, payload TEXT NOT NULL)');
const insert = db.prepare('INSERT OR IGNORE INTO deliveries (id, payload) VALUES (?, ?)');

let pending: { id: string; body: string; done: () => void }[] = [];
const commit = db.transaction((batch: typeof pending) => batch.forEach((d) => insert.run(d.id, d.body)));
const flush = () => {
  const batch = pending;
  pending = [];
  commit(batch);
  batch.forEach((d) => d.done());
};

const app = express();
app.disable('x-powered-by');
app.disable('etag');
app.post('/webhooks', express.raw({ type: () => true, limit: '256kb' }), (req, res) => {
  const body = req.body as Buffer;
  if (!verifiesHmac(req.headers, body)) return void res.status(401).json({ ok: false });
  const id = String(req.headers['x-service-delivery']);
  if (pending.length === 0) setImmediate(flush);
  pending.push({ id, body: body.toString('utf8'), done: () => res.json({ ok: true, id, duplicate: false }) });
});
const server = app.listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () =>
  server
    .close(() => {
      db.close();
      rmSync(dir, { recursive: true, force: true });
      process.exit(0);
    })
    .closeAllConnections(),
);
