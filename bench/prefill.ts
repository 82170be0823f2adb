import BetterSqlite3 from 'better-sqlite3';
import { partOf } from '../src/store/log/position.js';
import { BOX_COUNT, STORED_BODY_BYTES, boxIdOf, eventBody, newEventId } from './deliveries.js';

/** `count` deliveries received evenly between two epoch ms. */
export interface Span {
  count: number;
  from: number;
  to: number;
}

/**
 * Fills an already migrated SQLite file with delivered events as the relay would have left them: the
 * deliveries (~300-byte bodies) in the log, routed to NATS, and the boxes' last state (a delivered
 * event leaves no outbox row; NATS's cursors, made by the relay at its start, begin after them).
 * Rows go in in receipt order with random ids, with the indexes in place, as production writes them:
 * the rowid table and the log index grow at their end while the id and box indexes take random inserts and are left
 * as fragmented as a relay leaves them (building them afterwards would pack them unrealistically
 * well). Direct inserts in big unsynchronised transactions, since only the end state matters.
 */
export function prefill(file: string, spans: Span[]): void {
  const db = new BetterSqlite3(file);
  try {
    // OFF is refused by this build (defensive mode); a rollback journal in memory costs as little.
    db.pragma('journal_mode = MEMORY');
    db.pragma('synchronous = OFF');
    db.pragma('cache_size = -2097152');
    const insertDelivery = db.prepare(
      "INSERT INTO deliveries (id, type, box_id, created_at, received_at, attempt, payload, seq, part, sinks) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, 'nats')",
    );
    const insertBox = db.prepare(
      `INSERT INTO boxes (id, name, state, previous_state, state_changed_at, last_event_id, hydrated_at, last_seen_at)
       VALUES (?, ?, 'ready', 'cloning', ?, ?, NULL, ?)`,
    );
    let n = 0;
    const chunk = db.transaction((span: Span, from: number, to: number) => {
      for (let i = from; i < to; i++, n++) {
        const at = span.from + Math.floor(((span.to - span.from) * i) / span.count);
        const createdAt = new Date(at - 50).toISOString();
        const id = newEventId();
        const { type, body } = eventBody(id, n, createdAt, STORED_BODY_BYTES);
        const boxId = boxIdOf(n * 7919);
        insertDelivery.run(id, type, boxId, createdAt, at, body, n + 1, partOf(boxId));
      }
    });
    let last = 0;
    for (const span of [...spans].sort((a, b) => a.from - b.from)) {
      for (let from = 0; from < span.count; from += 20_000) chunk(span, from, Math.min(span.count, from + 20_000));
      last = Math.max(last, span.to);
    }
    db.transaction(() => {
      for (let b = 0; b < BOX_COUNT; b++) {
        insertBox.run(boxIdOf(b), `ci-${boxIdOf(b).slice(3)}`, new Date(last).toISOString(), newEventId(), last);
      }
    })();
    db.pragma('journal_mode = WAL');
  } finally {
    db.close();
  }
}
