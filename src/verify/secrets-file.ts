import { readFileSync } from 'node:fs';
import { describeError, errorCodeOf, RelayError } from '../errors.js';
import { parseIsoWithZone } from '../iso-time.js';
import { oncePerReason, type Logger, type ReasonLog } from '../log.js';
import type { SecretsSnapshot, SigningSecret } from './secrets.js';

/** A problem in the secrets file, named by line number only: the line itself holds a secret. */
export class SecretsFileError extends RelayError {
  readonly code = 'invalid_secrets_file';
}

/** One secret a line, optionally followed by whitespace and an ISO-8601 time (with zone) of expiry. */
export function parseSecretsFile(text: string): SigningSecret[] {
  const secrets: SigningSecret[] = [];
  text.split(/\r?\n/).forEach((line, index) => {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const [value, expiry, ...extra] = trimmed.split(/\s+/) as [string, ...string[]];
    if (extra.length > 0) throw new SecretsFileError(`line ${index + 1}: expected a secret and at most one expiry time`);
    if (expiry === undefined) return void secrets.push({ value });
    const expiresAt = parseIsoWithZone(expiry);
    if (expiresAt === undefined) {
      throw new SecretsFileError(`line ${index + 1}: expiry is not an ISO-8601 time with a zone`);
    }
    secrets.push({ value, expiresAt });
  });
  return secrets;
}

/**
 * A secrets file read once, as serve first loads it; a problem goes to `problems` naming `where`, the
 * file and a line number, never a secret, and leaves no secrets.
 */
export function secretsOfFile(path: string, where: string, readFile: (path: string) => string, problems: string[]): SigningSecret[] {
  try {
    return parseSecretsFile(readFile(path));
  } catch (error) {
    problems.push(`${where} (${path}): ${error instanceof SecretsFileError ? error.message : `cannot read (${errorCodeOf(error) ?? 'error'})`}`);
    return [];
  }
}

export interface SecretsFileOptions {
  logger: Logger;
  readFile?: (path: string) => string;
  /** Called after a changed file was loaded; tests await it instead of sleeping. */
  onChange?: (secrets: SigningSecret[]) => void;
}

/**
 * The secrets file, re-read on a short interval. Reading by path each time follows a Kubernetes
 * Secret's symlink swap, which file watchers miss. A bad read keeps the last good set.
 */
export class SecretsFile implements SecretsSnapshot {
  private secrets: SigningSecret[] = [];
  private lastText: string | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly readFile: (path: string) => string;
  private readonly report: ReasonLog<string>;

  constructor(
    readonly path: string,
    private readonly options: SecretsFileOptions,
  ) {
    this.readFile = options.readFile ?? ((p) => readFileSync(p, 'utf8'));
    // Each distinct problem once, not on every poll.
    this.report = oncePerReason((reason: string) =>
      options.logger.error({ secretsFile: path, reason }, 'secrets file unreadable or invalid; keeping the last good set'),
    );
  }

  current(): SigningSecret[] {
    return this.secrets;
  }

  /** First load: a missing or invalid file is fatal, since there is no last good set to keep. */
  load(): void {
    const text = this.readFile(this.path);
    this.secrets = parseSecretsFile(text);
    this.lastText = text;
  }

  /** Re-reads the file; returns whether the accepted set changed. Never throws. */
  refresh(): boolean {
    let text: string;
    try {
      text = this.readFile(this.path);
    } catch (error) {
      this.report(errorCodeOf(error) ?? 'unreadable');
      return false;
    }
    if (text === this.lastText) return false;
    this.lastText = text;
    try {
      this.secrets = parseSecretsFile(text);
    } catch (error) {
      this.report(describeError(error));
      return false;
    }
    this.report.clear();
    this.options.logger.info({ secretsFile: this.path, count: this.secrets.length }, 'secrets file reloaded');
    this.options.onChange?.(this.secrets);
    return true;
  }

  start(intervalMs: number): void {
    this.timer = setInterval(() => this.refresh(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
