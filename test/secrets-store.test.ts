import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { Database } from '../src/store/engines/database.js';
import { openMigrated } from '../src/store/engines/migrate.js';
import { createSecretsStore } from '../src/store/state/secrets-store.js';
import { createSecretCipher } from '../src/upstream/secret-cipher.js';
import { ManualClock } from './support/clock.js';
import { engines } from './support/databases.js';
import { captureLogs } from './support/log-capture.js';

const KEY = `base64:${randomBytes(32).toString('base64')}`;
const WEBHOOK = 'wh_0123456789abcdef01234567';
const OTHER = 'wh_fedcba9876543210fedcba98';

describe.each(engines)('secrets store on $name', (engine) => {
  let database: Database;
  beforeEach(async () => {
    ({ database } = await openMigrated({ url: await engine.url() }));
  });
  afterEach(async () => {
    await database.close();
  });

  /** A store on the test's database, as one process (relay or CLI) with its own key sees it. */
  async function open(key?: string) {
    const clock = new ManualClock();
    const logs = captureLogs();
    const store = createSecretsStore({ db: database.kysely, cipher: createSecretCipher(key), clock, logger: logs.logger });
    return { store, clock, logs };
  }

  const rawRows = () => database.kysely.selectFrom('secrets').selectAll().orderBy('id').execute();

  it('lists unexpired secrets newest first, the same instant ordered by insertion', async () => {
    const { store, clock } = await open();
    await store.add({ value: 'whsec_first', webhookId: WEBHOOK });
    clock.advance(1000);
    await store.add({ value: 'whsec_second', webhookId: OTHER });
    await store.add({ value: 'whsec_third', webhookId: null });
    expect(await store.list()).toEqual([
      { value: 'whsec_third', expiresAt: undefined },
      { value: 'whsec_second', expiresAt: undefined },
      { value: 'whsec_first', expiresAt: undefined },
    ]);
  });

  it('retires the webhook\'s other secrets at a time, never later than they already expire, and drops them after it', async () => {
    const { store, clock } = await open();
    const start = clock.now();
    await store.add({ value: 'whsec_old', webhookId: WEBHOOK });
    const soon = await store.add({ value: 'whsec_soon', webhookId: WEBHOOK });
    await store.retire(WEBHOOK, { except: -1, at: start + 10_000 }); // both now expire at +10 s
    await database.kysely.updateTable('secrets').set({ expires_at: start + 5_000 }).where('id', '=', soon).execute();
    await store.add({ value: 'whsec_other_webhook', webhookId: OTHER });
    clock.advance(1);
    const current = await store.add({ value: 'whsec_current', webhookId: WEBHOOK });

    // whsec_soon keeps its earlier expiry; whsec_old moves from +10 s to +8 s.
    expect(await store.retire(WEBHOOK, { except: current, at: start + 8_000 })).toBe(1);
    expect(await store.list()).toEqual([
      { value: 'whsec_current', expiresAt: undefined },
      { value: 'whsec_other_webhook', expiresAt: undefined },
      { value: 'whsec_soon', expiresAt: start + 5_000 },
      { value: 'whsec_old', expiresAt: start + 8_000 },
    ]);
    clock.set(start + 5_000); // an expiry instant itself is still accepted, as in the ring
    expect((await store.list()).map((s) => s.value)).toContain('whsec_soon');
    clock.set(start + 5_001);
    expect((await store.list()).map((s) => s.value)).toEqual(['whsec_current', 'whsec_other_webhook', 'whsec_old']);
    clock.set(start + 8_001);
    expect((await store.list()).map((s) => s.value)).toEqual(['whsec_current', 'whsec_other_webhook']);
  });

  it('stores plaintext without a key and AES-GCM ciphertext with one', async () => {
    const plain = await open();
    await plain.store.add({ value: 'whsec_plainvalue', webhookId: WEBHOOK });
    const encrypted = await open(KEY);
    await encrypted.store.add({ value: 'whsec_encryptedvalue', webhookId: WEBHOOK });

    const rows = await rawRows();
    expect(rows[0]?.secret).toBe('whsec_plainvalue');
    expect(rows[1]?.secret).toMatch(/^enc:v1:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/);
    expect(rows[1]?.secret).not.toContain('encryptedvalue');
    // A keyed store still reads rows written before the key was set.
    expect((await encrypted.store.list()).map((s) => s.value)).toEqual(['whsec_encryptedvalue', 'whsec_plainvalue']);
  });

  it('skips a row it cannot decrypt, logging its id once and never the stored value', async () => {
    const writer = await open(KEY);
    const id = await writer.store.add({ value: 'whsec_lockedvalue', webhookId: WEBHOOK });
    await (await open()).store.add({ value: 'whsec_readable_in_both', webhookId: OTHER });
    const stored = (await rawRows())[0]?.secret as string;

    for (const key of [`base64:${randomBytes(32).toString('base64')}`, undefined]) {
      const reader = await open(key);
      expect(await reader.store.list()).toEqual([{ value: 'whsec_readable_in_both', expiresAt: undefined }]);
      expect(await reader.store.list()).toHaveLength(1);
      const errors = reader.logs.entries().filter((e) => e.level === 50);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ secretId: id, code: key === undefined ? 'secret_key_missing' : 'secret_decrypt_failed' });
      expect(reader.logs.text()).not.toContain(stored.slice('enc:v1:'.length, 20));
      expect(reader.logs.text()).not.toContain('lockedvalue');
    }
  });
});
