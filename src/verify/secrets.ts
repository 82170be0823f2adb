import { createSecretKey, type KeyObject } from 'node:crypto';
import { InvalidSignatureError, StorageUnavailableError } from '../errors.js';
import type { Clock } from '../clock.js';
import { computeSignature, matchesAny, parseSignatureHeader } from './signature.js';

export type SecretOrigin = 'env' | 'file' | 'database';

export interface SigningSecret {
  value: string;
  /** Epoch ms after which the secret is refused. */
  expiresAt?: number | undefined;
}

export interface AcceptedSecret extends SigningSecret {
  origin: SecretOrigin;
  /** 0-based position among the accepted secrets (contract section 1). */
  slot: number;
}

/** Where the database's secrets come from; re-read when no accepted secret matches. */
export interface DatabaseSecrets {
  list(): Promise<SigningSecret[]>;
}

/** A source whose secrets may change while the relay runs (the secrets file). */
export interface SecretsSnapshot {
  /** A new array whenever the set changes (the ring keeps its list while this one is returned). */
  current(): SigningSecret[];
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * The HMAC keys of one secret: the UTF-8 bytes of the whole string (the contract's rule) and, when
 * what follows `whsec_` is base64, its decoded bytes (the Standard Webhooks rule).
 */
export function keysOf(secret: string): KeyObject[] {
  const standard = standardWebhooksKey(secret);
  const utf8 = createSecretKey(Buffer.from(secret, 'utf8'));
  return standard ? [utf8, createSecretKey(standard)] : [utf8];
}

/** The Standard Webhooks key of a `whsec_<base64>` secret; undefined for any other form. */
export function standardWebhooksKey(secret: string): Buffer | undefined {
  const encoded = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : '';
  if (!BASE64.test(encoded)) return undefined;
  const decoded = Buffer.from(encoded, 'base64');
  return decoded.length > 0 ? decoded : undefined;
}

export interface SecretRingOptions {
  env: string[];
  file?: SecretsSnapshot | undefined;
  database?: DatabaseSecrets | undefined;
  clock: Clock;
  /** Least time between two database re-reads triggered by misses. */
  databaseRefreshMs?: number;
  /** Called when a database read returns a different set (values are for comparing, never for logs). */
  onDatabaseChange?: (secrets: SigningSecret[]) => void;
}

/**
 * The accepted secrets in contract order (env, file, database newest first), with HMAC keys cached
 * per secret, and verification of a delivery against all of them.
 */
export class SecretRing {
  private databaseSecrets: SigningSecret[] = [];
  private lastDatabaseRead = Number.NEGATIVE_INFINITY;
  private readonly keyCache = new Map<string, KeyObject[]>();
  private readonly refreshMs: number;
  private reading: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private acceptedList: { file: SigningSecret[] | undefined; database: SigningSecret[]; until: number; secrets: AcceptedSecret[] } | undefined;

  constructor(private readonly options: SecretRingOptions) {
    this.refreshMs = options.databaseRefreshMs ?? 1000;
  }

  /**
   * The accepted secrets now. Listed once and kept (it runs for every request) until a source
   * brings another set or the first of them expires.
   */
  accepted(): AcceptedSecret[] {
    const now = this.options.clock.now();
    const file = this.options.file?.current();
    const kept = this.acceptedList;
    if (kept && kept.file === file && kept.database === this.databaseSecrets && now <= kept.until) return kept.secrets;
    const tagged: Omit<AcceptedSecret, 'slot'>[] = [
      ...this.options.env.map((value) => ({ value, origin: 'env' as const })),
      ...(file ?? []).map((s) => ({ ...s, origin: 'file' as const })),
      ...this.databaseSecrets.map((s) => ({ ...s, origin: 'database' as const })),
    ];
    const secrets = tagged.filter((s) => s.expiresAt === undefined || now <= s.expiresAt).map((s, slot) => ({ ...s, slot }));
    const until = Math.min(...secrets.map((s) => s.expiresAt ?? Number.POSITIVE_INFINITY));
    this.acceptedList = { file, database: this.databaseSecrets, until, secrets };
    return secrets;
  }

  /**
   * Reads the database's secrets now (start-up, the periodic refresh, a miss). Concurrent callers
   * share one read, so a burst of deliveries signed with a new secret waits for it instead of failing.
   */
  refreshDatabase(): Promise<void> {
    const database = this.options.database;
    if (!database) return Promise.resolve();
    this.reading ??= (async () => {
      this.lastDatabaseRead = this.options.clock.now();
      const next = await database.list();
      const changed = !sameSecrets(next, this.databaseSecrets);
      this.databaseSecrets = next;
      if (changed) this.options.onDatabaseChange?.(next);
    })().finally(() => {
      this.reading = undefined;
    });
    return this.reading;
  }

  /**
   * Re-reads the database every `intervalMs`, so expiry gauges and `secrets_valid` follow a rotation
   * done elsewhere even without traffic. A failed read keeps the last set and goes to `onError`.
   */
  startDatabaseRefresh(intervalMs: number, onError: (error: unknown) => void): void {
    if (!this.options.database || this.timer) return;
    this.timer = setInterval(() => void this.refreshDatabase().catch(onError), intervalMs);
    this.timer.unref();
  }

  /** Stops the periodic refresh and waits for a read in flight, so the database can be closed. */
  async stopDatabaseRefresh(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.reading?.catch(() => undefined);
  }

  /**
   * Returns the slot of the secret that verifies the delivery. Throws MalformedSignatureError when
   * the header has no well-formed v1 item and InvalidSignatureError when nothing matches, after one
   * database re-read (rate-limited) so a rotation done by another replica is seen at once;
   * StorageUnavailableError when that re-read fails.
   */
  async verify(deliveryId: string, timestamp: string, signatureHeader: string, body: Buffer): Promise<number> {
    const candidates = parseSignatureHeader(signatureHeader);
    const slot = this.findSlot(deliveryId, timestamp, candidates, body);
    if (slot !== undefined) return slot;
    const due = this.options.clock.now() - this.lastDatabaseRead >= this.refreshMs;
    if (this.options.database && (this.reading !== undefined || due)) {
      // Unable to tell whether a newer secret would verify it: 503, so the upstream tries again later.
      await this.refreshDatabase().catch((error: unknown) => {
        throw new StorageUnavailableError({ cause: error });
      });
      const retried = this.findSlot(deliveryId, timestamp, candidates, body);
      if (retried !== undefined) return retried;
    }
    throw new InvalidSignatureError();
  }

  private findSlot(deliveryId: string, timestamp: string, candidates: Buffer[], body: Buffer): number | undefined {
    for (const secret of this.accepted()) {
      for (const key of this.keysFor(secret.value)) {
        if (matchesAny(computeSignature(key, deliveryId, timestamp, body), candidates)) return secret.slot;
      }
    }
    return undefined;
  }

  private keysFor(secret: string): KeyObject[] {
    let keys = this.keyCache.get(secret);
    if (!keys) {
      keys = keysOf(secret);
      // Secrets come and go with rotations; a long-running relay should not keep every one ever seen.
      if (this.keyCache.size >= 64) this.keyCache.clear();
      this.keyCache.set(secret, keys);
    }
    return keys;
  }
}

function sameSecrets(a: SigningSecret[], b: SigningSecret[]): boolean {
  return a.length === b.length && a.every((s, i) => s.value === b[i]?.value && s.expiresAt === b[i]?.expiresAt);
}
