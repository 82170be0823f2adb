import { createCipheriv, createDecipheriv, randomBytes, scryptSync } from 'node:crypto';
import { RelayError, type SecretCipherErrorCode } from '../errors.js';

/**
 * Encrypts webhook signing secrets at rest (the `secrets` table) with AES-256-GCM.
 *
 * Key (BOXRELAY_SECRETS_ENCRYPTION_KEY, config key `secretsEncryptionKey`):
 * - `base64:<44 chars>`, or bare base64 that decodes to exactly 32 bytes: used as the AES key as is
 *   (generate with `openssl rand -base64 32`);
 * - anything else is a passphrase, stretched with scrypt (N=2^15, r=8, p=1). scrypt rather than HKDF
 *   because a passphrase is low-entropy and HKDF adds no work against guessing. The salt is fixed
 *   because the stored format has no room for one; the key is derived once per process.
 * - unset or blank: no encryption; encrypt() and decrypt() pass plaintext through.
 *
 * Stored form: `enc:v1:<b64 iv>:<b64 tag>:<b64 ciphertext>`, 12-byte random IV, 16-byte tag, the
 * `enc:v1` prefix authenticated as AAD. decrypt() returns a string without the `enc:` prefix as is,
 * so rows written before a key was configured keep working.
 */

export const SECRETS_ENCRYPTION_KEY_ENV = 'BOXRELAY_SECRETS_ENCRYPTION_KEY';

const PREFIX = 'enc:v1:';
const AAD = Buffer.from('enc:v1');
const SCRYPT_SALT = 'boxrelay/secret-cipher/v1';

export class SecretCipherError extends RelayError {
  constructor(
    readonly code: SecretCipherErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface SecretCipher {
  /** True when a key is configured. */
  readonly enabled: boolean;
  encrypt(plaintext: string): string;
  decrypt(stored: string): string;
}

export function isEncryptedSecret(value: string): boolean {
  return value.startsWith('enc:');
}

export function createSecretCipher(keyText: string | undefined): SecretCipher {
  const key = keyText === undefined || keyText.trim() === '' ? undefined : deriveKey(keyText.trim());

  return {
    enabled: key !== undefined,

    encrypt(plaintext) {
      if (key === undefined) {
        // Stored as is, it would later be taken for ciphertext.
        if (isEncryptedSecret(plaintext)) throw new SecretCipherError('secret_format_invalid', 'a plaintext secret must not start with "enc:"');
        return plaintext;
      }
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', key, iv);
      cipher.setAAD(AAD);
      const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return `${PREFIX}${iv.toString('base64')}:${cipher.getAuthTag().toString('base64')}:${ciphertext.toString('base64')}`;
    },

    decrypt(stored) {
      if (!isEncryptedSecret(stored)) return stored;
      if (!stored.startsWith(PREFIX)) {
        throw new SecretCipherError('secret_format_invalid', 'stored secret uses an unknown encryption format (expected enc:v1:)');
      }
      if (key === undefined) {
        throw new SecretCipherError('secret_key_missing', `stored secret is encrypted but ${SECRETS_ENCRYPTION_KEY_ENV} is not set`);
      }
      const parts = stored.slice(PREFIX.length).split(':');
      const [iv, tag, ciphertext] = parts.map((part) => Buffer.from(part, 'base64'));
      if (parts.length !== 3 || iv?.length !== 12 || tag?.length !== 16 || ciphertext === undefined) {
        throw new SecretCipherError('secret_format_invalid', 'stored secret is not a well-formed enc:v1 value');
      }
      try {
        const decipher = createDecipheriv('aes-256-gcm', key, iv);
        decipher.setAAD(AAD);
        decipher.setAuthTag(tag);
        return Buffer.concat([decipher.update(ciphertext), decipher.final()]).toString('utf8');
      } catch {
        // GCM cannot tell a wrong key from a damaged value; both fail authentication.
        throw new SecretCipherError(
          'secret_decrypt_failed',
          `stored secret cannot be decrypted: ${SECRETS_ENCRYPTION_KEY_ENV} differs from the key it was encrypted with, or the value is damaged`,
        );
      }
    },
  };
}

function deriveKey(text: string): Buffer {
  if (text.startsWith('base64:')) {
    const raw = decodeStrictBase64(text.slice('base64:'.length));
    if (raw?.length !== 32) throw new SecretCipherError('secret_key_invalid', `${SECRETS_ENCRYPTION_KEY_ENV}: base64: key must decode to 32 bytes`);
    return raw;
  }
  const raw = decodeStrictBase64(text);
  if (raw?.length === 32) return raw;
  return scryptSync(text, SCRYPT_SALT, 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
}

/** Buffer.from(..., 'base64') skips junk silently; only a value that round-trips counts as base64. */
function decodeStrictBase64(text: string): Buffer | undefined {
  const raw = Buffer.from(text, 'base64');
  return raw.toString('base64') === text ? raw : undefined;
}
