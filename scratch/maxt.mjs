import Database from 'better-sqlite3';
const db = new Database(':memory:');
db.exec(`CREATE TABLE d (id TEXT PRIMARY KEY, log_xid INTEGER NOT NULL DEFAULT 0, seq INTEGER); CREATE UNIQUE INDEX dl ON d (log_xid, seq) WHERE seq IS NOT NULL;`);
const ins = db.prepare('INSERT INTO d (id, seq) VALUES (?, ?)');
db.transaction(() => { for (let i = 0; i < 500000; i++) ins.run('e' + i, i + 1); })();
const q = db.prepare('SELECT COALESCE(MAX(seq), 0) + 1 AS n FROM d WHERE log_xid = 0 AND seq IS NOT NULL');
let t = performance.now(); for (let i = 0; i < 1000; i++) q.get(); console.log('µs per max', ((performance.now() - t) * 1000 / 1000).toFixed(1), q.get());
