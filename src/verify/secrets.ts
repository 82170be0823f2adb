import { InvalidSignatureError } from '../errors.js';
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
  current(): SigningSecret[];
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/**
 * The HMAC keys of one secret: the UTF-8 bytes of the whole string (the contract's rule) and, when
 * what follows `whsec_` is base64, its decoded bytes (the Standard Webhooks rule).
 */
export function keysOf(secret: string): Buffer[] {
  const standard = standardWebhooksKey(secret);
  return standard ? [Buffer.from(secret, 'utf8'), standard] : [Buffer.from(secret, 'utf8')];
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
}

/**
 * The accepted secrets in contract order (env, file, database newest first), with HMAC keys cached
 * per secret, and verification of a delivery against all of them.
 */
export class SecretRing {
  private databaseSecrets: SigningSecret[] = [];
  private lastDatabaseRead = Number.NEGATIVE_INFINITY;
  private readonly keyCache = new Map<string, Buffer[]>();
  private readonly refreshMs: number;

  constructor(private readonly options: SecretRingOptions) {
    this.refreshMs = options.databaseRefreshMs ?? 1000;
  }

  accepted(): AcceptedSecret[] {
    const now = this.options.clock.now();
    const tagged: Omit<AcceptedSecret, 'slot'>[] = [
      ...this.options.env.map((value) => ({ value, origin: 'env' as const })),
      ...(this.options.file?.current() ?? []).map((s) => ({ ...s, origin: 'file' as const })),
      ...this.databaseSecrets.map((s) => ({ ...s, origin: 'database' as const })),
    ];
    return tagged
      .filter((s) => s.expiresAt === undefined || now <= s.expiresAt)
      .map((s, slot) => ({ ...s, slot }));
  }

  /** Reads the database's secrets now (start-up, and after `upstream rotate`). */
  async refreshDatabase(): Promise<void> {
    if (!this.options.database) return;
    this.lastDatabaseRead = this.options.clock.now();
    this.databaseSecrets = await this.options.database.list();
  }

  /**
   * Returns the slot of the secret that verifies the delivery. Throws MalformedSignatureError when
   * the header has no well-formed v1 item and InvalidSignatureError when nothing matches, after one
   * database re-read (rate-limited) so a rotation done by another replica is seen at once.
   */
  async verify(deliveryId: string, timestamp: string, signatureHeader: string, body: Buffer): Promise<number> {
    const candidates = parseSignatureHeader(signatureHeader);
    const slot = this.findSlot(deliveryId, timestamp, candidates, body);
    if (slot !== undefined) return slot;
    if (this.options.database && this.options.clock.now() - this.lastDatabaseRead >= this.refreshMs) {
      await this.refreshDatabase();
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

  private keysFor(secret: string): Buffer[] {
    let keys = this.keyCache.get(secret);
    if (!keys) {
      keys = keysOf(secret);
      this.keyCache.set(secret, keys);
    }
    return keys;
  }
}
