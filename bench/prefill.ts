import BetterSqlite3 from 'better-sqlite3';
import { DAY_MS } from '../src/store/prune.js';
import { BOX_COUNT, boxIdOf, eventBody, newEventId } from './deliveries.js';

/**
 * Fills an already migrated SQLite file with `count` delivered events as the relay would have left
 * them: the deliveries and the boxes' last state (a delivered event leaves no outbox row). Direct
 * inserts in big unsynchronised transactions, since only the end state matters here.
 */
export function prefill(file: string, count: number): void {
  const db = new BetterSqlite3(file);
  try {
    db.pragma('journal_mode = OFF');
    db.pragma('synchronous = OFF');
    db.pragma('cache_size = -1048576');
    const insertDelivery = db.prepare(
      'INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload) VALUES (?, ?, ?, ?, ?, 1, ?)',
    );
    const insertBox = db.prepare(
      `INSERT INTO boxes (id, name, state, previous_state, state_changed_at, last_event_id, hydrated_at, last_seen_at)
       VALUES (?, ?, 'ready', 'cloning', ?, ?, NULL, ?)`,
    );
    // A week of history ending a minute ago: well inside the default 30-day retention.
    const end = Date.now() - 60_000;
    const start = end - 7 * DAY_MS;
    const chunk = db.transaction((from: number, to: number) => {
      for (let i = from; i < to; i++) {
        const at = start + Math.floor(((end - start) * i) / count);
        const createdAt = new Date(at - 50).toISOString();
        const id = newEventId();
        const { type, body } = eventBody(id, i, createdAt);
        insertDelivery.run(id, type, boxIdOf(i * 7919), createdAt, at, body);
      }
    });
    for (let from = 0; from < count; from += 50_000) chunk(from, Math.min(count, from + 50_000));
    db.transaction(() => {
      for (let b = 0; b < BOX_COUNT; b++) {
        insertBox.run(boxIdOf(b), `ci-${boxIdOf(b).slice(3)}`, new Date(end).toISOString(), newEventId(), end);
      }
    })();
    db.pragma('journal_mode = WAL');
  } finally {
    db.close();
  }
}
