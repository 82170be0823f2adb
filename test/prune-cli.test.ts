import { beforeAll, describe, expect, it } from 'vitest';
import { parseEvent } from '../src/events/parse-event.js';
import { DAY_MS } from '../src/clock.js';
import { openStore } from '../src/store/store.js';
import { sqliteFile } from './support/databases.js';
import { requireBuild, runCli } from './support/process.js';
import { eventId } from './support/sign.js';

beforeAll(requireBuild);

/** A database holding deliveries received `ages` days ago (no fan-out work left). */
async function seeded(ages: number[]): Promise<string> {
  const url = sqliteFile();
  const store = await openStore({ url });
  try {
    for (const [i, age] of ages.entries()) {
      const id = eventId();
      const body = JSON.stringify({ id, type: 'box.ready', createdAt: '2026-01-01T00:00:00Z', data: { box: { id: `bx_${i}` }, state: 'ready' } });
      await store.writer.record({ event: parseEvent(Buffer.from(body), id), receivedAt: Date.now() - age * DAY_MS, attempt: 1, sinks: [] });
    }
  } finally {
    await store.close();
  }
  return url;
}

describe('boxrelay prune', () => {
  it('prunes the configured database with BOXRELAY_RETENTION_DAYS, or --days, and says what it removed', async () => {
    const database = await seeded([40, 31, 20, 1]);
    const first = await runCli(['prune'], { BOXRELAY_DATABASE: database, BOXRELAY_RETENTION_DAYS: '30' });
    expect(first.stderr).toBe('');
    expect(first.code).toBe(0);
    expect(first.stdout).toMatch(/^removed deliveries: 2, boxes: 2 \(older than \d{4}-\d\d-\d\dT[\d:.]+Z\), expired secrets: 0, audit entries: 0\n$/);

    const second = await runCli(['prune', '--days', '10'], { BOXRELAY_DATABASE: database, BOXRELAY_RETENTION_DAYS: '30' });
    expect(second.stdout).toMatch(/^removed deliveries: 1, boxes: 1 /);
    const again = await runCli(['prune', '--days', '10'], { BOXRELAY_DATABASE: database });
    expect(again.stdout).toMatch(/^removed deliveries: 0, boxes: 0 /);
  });

  it('refuses --days 0 (it would drop every delivery, ending deduplication)', async () => {
    const refused = await runCli(['prune', '--days', '0'], { BOXRELAY_DATABASE: sqliteFile() });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toBe('boxrelay: --days must be at least 1\n');
  });
});
