import { openMigrated } from '/work/main/dist/src/store/migrate.js';
const { database } = await openMigrated({ url: '/tmp/plan.db' });
const q = (s) => console.log(s.slice(0, 60), '\n  ', database.sqlite.prepare('EXPLAIN QUERY PLAN ' + s).all().map((r) => r.detail).join(' | '));
q(`SELECT COALESCE(MAX(seq), 0) + 1 FROM deliveries WHERE log_xid = 0 AND seq IS NOT NULL`);
q(`SELECT log_xid, seq, part, id FROM deliveries WHERE seq IS NOT NULL AND (log_xid, seq) > (0, 5) ORDER BY log_xid, seq LIMIT 100`);
q(`SELECT count(*) AS backlog FROM deliveries d JOIN log_cursors c ON c.sink = 'x' AND c.part = d.part WHERE d.seq IS NOT NULL AND (d.log_xid, d.seq) > (0, 5) AND (d.log_xid, d.seq) > (c.xid, c.seq) AND (',' || d.sinks || ',') LIKE '%,x,%' AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.delivery_id = d.id AND o.sink = 'x')`);
await database.close();
