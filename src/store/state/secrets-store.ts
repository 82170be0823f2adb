import type { Kysely } from 'kysely';
import type { Clock } from '../../clock.js';
import { DEFAULT_ACCOUNT } from '../../config/default-account.js';
import type { Logger } from '../../log.js';
import { SecretCipherError, type SecretCipher } from '../../upstream/secret-cipher.js';
import type { DatabaseSecrets, SigningSecret } from '../../verify/secrets.js';
import type { Schema } from '../schema.js';

/**
 * The signing secrets `boxrelay upstream register|rotate` received for one account, shared by every
 * replica through the `secrets` table, encrypted at rest when a key is configured. Each row belongs
 * to one account (contract section 21): a store reads, adds and retires its account's only. Single
 * statements only, so the same code is safe on SQLite (see the SQLite rule) and PostgreSQL.
 */
export interface SecretsStore extends DatabaseSecrets {
  /** Stores a secret as the newest one; returns its row id. */
  add(secret: { value: string; webhookId: string | null }): Promise<number>;
  /**
   * Makes the webhook's other secrets expire at `at` (one that already expires sooner keeps its
   * time); returns how many rows were changed.
   */
  retire(webhookId: string, options: { except: number; at: number }): Promise<number>;
  /** Unexpired secrets, newest first, decrypted; undecryptable rows are skipped (and logged by id). */
  list(): Promise<SigningSecret[]>;
}

export interface SecretsStoreOptions {
  db: Kysely<Schema>;
  /** Default: `default`, whose endpoint is `/webhooks`. */
  account?: string;
  cipher: SecretCipher;
  clock: Clock;
  logger: Logger;
}

export function createSecretsStore({ db, account = DEFAULT_ACCOUNT, cipher, clock, logger }: SecretsStoreOptions): SecretsStore {
  // A bad row is read again on every refresh: report it once per process, not once a second.
  const reported = new Set<number>();

  return {
    async add({ value, webhookId }) {
      const row = await db
        .insertInto('secrets')
        .values({ account, secret: cipher.encrypt(value), webhook_id: webhookId, created_at: clock.now(), expires_at: null })
        .returning('id')
        .executeTakeFirstOrThrow();
      return Number(row.id);
    },

    async retire(webhookId, { except, at }) {
      const result = await db
        .updateTable('secrets')
        .set({ expires_at: at })
        .where('account', '=', account)
        .where('webhook_id', '=', webhookId)
        .where('id', '<>', except)
        .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>', at)]))
        .executeTakeFirst();
      return Number(result.numUpdatedRows);
    },

    async list() {
      const rows = await db
        .selectFrom('secrets')
        .select(['id', 'secret', 'expires_at'])
        .where('account', '=', account)
        .where((eb) => eb.or([eb('expires_at', 'is', null), eb('expires_at', '>=', clock.now())]))
        .orderBy('created_at', 'desc')
        .orderBy('id', 'desc')
        .execute();
      const secrets: SigningSecret[] = [];
      for (const row of rows) {
        try {
          secrets.push({ value: cipher.decrypt(row.secret), expiresAt: row.expires_at ?? undefined });
        } catch (error) {
          if (!(error instanceof SecretCipherError)) throw error;
          const id = Number(row.id);
          if (!reported.has(id)) logger.error({ secretId: id, code: error.code }, 'stored signing secret cannot be decrypted (check BOXRELAY_SECRETS_ENCRYPTION_KEY); skipped');
          reported.add(id);
        }
      }
      return secrets;
    },
  };
}
