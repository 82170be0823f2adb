import { DEFAULT_ACCOUNT } from './config/default-account.js';
import { untrusted } from './log.js';

/**
 * The one base of the relay's errors: each class stands for one failure and has a stable `code`
 * (from the list below: HTTP bodies, the CLI, reports, logs and scripts branch on it) and, where
 * another error led to it, that error as `cause`. Messages are safe to show: they never carry
 * secrets, signatures or request bodies, and cut untrusted values short. Only the codes of
 * `HttpErrorCode` have an HTTP status, given in one place: src/http/status.ts.
 */
export abstract class RelayError extends Error {
  abstract readonly code: ErrorCode;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

export type ErrorCode =
  | HttpErrorCode
  | UpstreamErrorCode
  | ReconcileFailureCode
  | SecretCipherErrorCode
  | StoreErrorCode
  | SetupErrorCode
  | SinkFailureCode
  | HookFilterErrorCode;

/** Refusals an HTTP client sees, each with its status in src/http/status.ts. */
export type HttpErrorCode =
  | 'missing_header'
  | 'duplicate_header'
  | 'malformed_timestamp'
  | 'timestamp_out_of_window'
  | 'payload_too_large'
  | 'malformed_signature'
  | 'invalid_signature'
  | 'invalid_event'
  | 'delivery_id_mismatch'
  | 'not_found'
  | 'method_not_allowed'
  | 'storage_unavailable'
  | 'unauthorized'
  | 'invalid_request'
  | 'reconcile_in_progress'
  | 'reconcile_not_configured'
  | 'internal_error';

/**
 * A relay error an HTTP client may see as such: only these classes answer with their own code and
 * status (src/http/status.ts). Any other error, even one whose code is spelled like an HTTP code (a
 * sink's `invalid_request`), answers 500 `internal_error`.
 */
export abstract class HttpRefusal extends RelayError {
  abstract override readonly code: HttpErrorCode;
}

/** Calls to the Sandbox Service API (src/upstream/errors.ts); the `boxrelay upstream` scripts branch on them. */
export type UpstreamErrorCode =
  | 'upstream_api_error'
  | 'upstream_unreachable'
  | 'upstream_response_lost'
  | 'upstream_invalid_response'
  | 'invalid_webhook_id';

/** Why a reconciliation run or its repair of a box failed (src/reconcile/errors.ts); the run report's `error` says it. */
export type ReconcileFailureCode = 'upstream_cursor_loop' | 'reconcile_lease_lost' | 'reconcile_bound_reached';

/** Signing secrets encrypted at rest (src/upstream/secret-cipher.ts). */
export type SecretCipherErrorCode = 'secret_key_invalid' | 'secret_key_missing' | 'secret_format_invalid' | 'secret_decrypt_failed';

/** Opening, migrating, locking, backing up and copying the database, retention and setting work aside (src/store). */
export type StoreErrorCode =
  | 'database_busy'
  | 'commit_timeout'
  | 'database_unavailable'
  | 'database_in_use'
  | 'migration_failed'
  | 'unknown_migration'
  | 'backup_failed'
  | 'backup_over_source'
  | 'target_not_empty'
  | 'copy_interrupted'
  | 'retention_step_failed'
  | 'set_aside_failed'
  | 'not_the_writer'
  | 'no_such_transaction';

/** The buses: each bus's failure codes start with its name (`amqp_down`, `redis_timeout`, `nats_no_ack`). */
export type BusName = 'nats' | 'amqp' | 'redis' | 'mqtt' | 'kafka' | 'sqs' | 'sns' | 's3';

/** Why an attempt on a sink failed (src/sinks/failures.ts): kept in `last_error`, never an HTTP answer. */
export type SinkFailureCode =
  | 'event_not_serializable'
  | 'transform_failed'
  | 'sink_error'
  | 'aborted'
  | 'invalid_request'
  | 'timeout'
  | 'connection_error'
  | `http_${number}`
  | `${BusName}_${string}`;

/** A hook's CEL filter (src/sinks/filter.ts): one that does not compile, one that fails on an event; a transform that does not compile. */
export type HookFilterErrorCode = 'filter_invalid' | 'filter_error' | 'transform_invalid';

/** Start-up and CLI refusals: settings, usage, the upstream commands. */
export type SetupErrorCode =
  | 'invalid_config'
  | 'invalid_tracing_config'
  | 'invalid_usage'
  | 'invalid_secrets_file'
  | 'no_secret'
  | 'inline_fanout_required'
  | 'upstream_not_configured'
  | 'secret_not_stored'
  | 'secrets_not_retired';

/** How many links of a cause chain are followed (a chain can be cyclic). */
const MAX_CAUSES = 8;
/** Foreign messages are cut to this many characters: a library's message may quote what it was given. */
const FOREIGN_TEXT_MAX = 200;

/**
 * The error, then its causes: an AggregateError (several addresses tried) leads to its first error.
 * Bounded, so a cyclic chain ends.
 */
export function causeChain(error: unknown): unknown[] {
  const chain: unknown[] = [];
  for (let link = error; link !== undefined && link !== null && chain.length < MAX_CAUSES && !chain.includes(link); ) {
    chain.push(link);
    const { errors, cause } = link as { errors?: unknown; cause?: unknown };
    link = Array.isArray(errors) && errors.length > 0 ? errors[0] : cause;
  }
  return chain;
}

/** The first string `code` along the chain: a system error's (`ECONNREFUSED`) or a driver's (`SQLITE_BUSY`, `57P01`). */
export function errorCodeOf(error: unknown): string | undefined {
  for (const link of causeChain(error)) {
    const { code } = link as { code?: unknown };
    if (typeof code === 'string') return code;
  }
  return undefined;
}

/**
 * Any error as one line for a log, a report, a span or the CLI: the one place an error becomes text.
 * A RelayError speaks for itself and its cause (its message is built safe and says what matters of
 * it); any other error (a driver's, a socket's) is told by its message, cut short, then its causes'.
 * `codes` puts each one's code before its message where the message lacks it (for operators' logs
 * and /readyz); a `secret` the caller just wrote is taken out before anything is cut (a driver's
 * message may quote it).
 */
export function describeError(error: unknown, { codes = false, secret }: { codes?: boolean; secret?: string } = {}): string {
  const hide = (text: string) => (secret ? text.split(secret).join('[redacted]') : text);
  const parts: string[] = [];
  for (const link of causeChain(error)) {
    if (link instanceof RelayError) {
      parts.push(hide(textOf(link, codes)));
      break;
    }
    const text = untrusted(hide(textOf(link, codes)), FOREIGN_TEXT_MAX);
    const last = parts.at(-1);
    if (text === '' || last?.includes(text)) continue;
    if (last !== undefined && text.includes(last)) parts[parts.length - 1] = text;
    else parts.push(text);
  }
  return parts.join(': ') || 'unknown error';
}

function textOf(error: unknown, codes: boolean): string {
  const { message, code } = (typeof error === 'object' ? error : { message: String(error) }) as { message?: unknown; code?: unknown };
  const text = typeof message === 'string' ? message : '';
  if (!codes || typeof code !== 'string' || text.includes(code)) return text;
  return text === '' ? code : `${code}: ${text}`;
}

export class MissingHeaderError extends HttpRefusal {
  readonly code = 'missing_header';
  constructor(readonly header: string) {
    super(`missing or empty header ${header}`);
  }
}

export class DuplicateHeaderError extends HttpRefusal {
  readonly code = 'duplicate_header';
  constructor(readonly header: string) {
    super(`header ${header} given more than once`);
  }
}

export class MalformedTimestampError extends HttpRefusal {
  readonly code = 'malformed_timestamp';
  constructor() {
    super('X-Service-Timestamp must be Unix seconds in ASCII digits');
  }
}

export class TimestampOutOfWindowError extends HttpRefusal {
  readonly code = 'timestamp_out_of_window';
  constructor(toleranceSeconds: number) {
    super(`X-Service-Timestamp is more than ${toleranceSeconds} seconds from now`);
  }
}

export class PayloadTooLargeError extends HttpRefusal {
  readonly code = 'payload_too_large';
  constructor(limitBytes: number) {
    super(`body exceeds ${limitBytes} bytes`);
  }
}

export class MalformedSignatureError extends HttpRefusal {
  readonly code = 'malformed_signature';
  constructor() {
    super('X-Service-Signature has no well-formed v1 item');
  }
}

export class InvalidSignatureError extends HttpRefusal {
  readonly code = 'invalid_signature';
  constructor() {
    super('no accepted secret produces this signature');
  }
}

export class InvalidEventError extends HttpRefusal {
  readonly code = 'invalid_event';
}

export class DeliveryIdMismatchError extends HttpRefusal {
  readonly code = 'delivery_id_mismatch';
  constructor() {
    super('body id differs from X-Service-Delivery');
  }
}

export class NotFoundError extends HttpRefusal {
  readonly code = 'not_found';
  constructor(message = 'not found') {
    super(message);
  }
}

export class MethodNotAllowedError extends HttpRefusal {
  readonly code = 'method_not_allowed';
  constructor() {
    super('method not allowed');
  }
}

export class StorageUnavailableError extends HttpRefusal {
  readonly code = 'storage_unavailable';
  constructor(options?: ErrorOptions) {
    super('storage cannot commit; retry later', options);
  }
}

export class UnauthorizedError extends HttpRefusal {
  readonly code = 'unauthorized';
  constructor() {
    super('missing or invalid bearer token');
  }
}

export class InvalidRequestError extends HttpRefusal {
  readonly code = 'invalid_request';
}

/** A reconciliation run is going on (on this or another replica): one at a time. */
export class ReconcileInProgressError extends HttpRefusal {
  readonly code = 'reconcile_in_progress';
  constructor() {
    super('a reconciliation run is in progress; see GET /admin/reconcile');
  }
}

/** The account has no API credentials to reconcile with (contract sections 9 and 21). */
export class ReconcileNotConfiguredError extends HttpRefusal {
  readonly code = 'reconcile_not_configured';
  constructor(account = DEFAULT_ACCOUNT) {
    super(
      account === DEFAULT_ACCOUNT
        ? 'reconciliation needs BOXRELAY_UPSTREAM_BASE_URL and BOXRELAY_UPSTREAM_API_KEY'
        : `reconciliation of account ${account} needs its upstreamBaseUrl and upstreamApiKey`,
    );
  }
}

/** A fault of the relay itself; the cause is logged, never sent. */
export class InternalError extends HttpRefusal {
  readonly code = 'internal_error';
  constructor(options?: ErrorOptions) {
    super('internal error', options);
  }
}
