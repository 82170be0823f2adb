/**
 * One class per failure, each with a stable `code`. The HTTP status for each code is decided in one
 * place only: src/http/status.ts. Messages are safe to show: they never carry secrets, signatures
 * or request bodies.
 */
export abstract class RelayError extends Error {
  abstract readonly code: ErrorCode;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

export type ErrorCode =
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

export class MissingHeaderError extends RelayError {
  readonly code = 'missing_header';
  constructor(readonly header: string) {
    super(`missing or empty header ${header}`);
  }
}

export class DuplicateHeaderError extends RelayError {
  readonly code = 'duplicate_header';
  constructor(readonly header: string) {
    super(`header ${header} given more than once`);
  }
}

export class MalformedTimestampError extends RelayError {
  readonly code = 'malformed_timestamp';
  constructor() {
    super('X-Service-Timestamp must be Unix seconds in ASCII digits');
  }
}

export class TimestampOutOfWindowError extends RelayError {
  readonly code = 'timestamp_out_of_window';
  constructor(toleranceSeconds: number) {
    super(`X-Service-Timestamp is more than ${toleranceSeconds} seconds from now`);
  }
}

export class PayloadTooLargeError extends RelayError {
  readonly code = 'payload_too_large';
  constructor(limitBytes: number) {
    super(`body exceeds ${limitBytes} bytes`);
  }
}

export class MalformedSignatureError extends RelayError {
  readonly code = 'malformed_signature';
  constructor() {
    super('X-Service-Signature has no well-formed v1 item');
  }
}

export class InvalidSignatureError extends RelayError {
  readonly code = 'invalid_signature';
  constructor() {
    super('no accepted secret produces this signature');
  }
}

export class InvalidEventError extends RelayError {
  readonly code = 'invalid_event';
}

export class DeliveryIdMismatchError extends RelayError {
  readonly code = 'delivery_id_mismatch';
  constructor() {
    super('body id differs from X-Service-Delivery');
  }
}

export class NotFoundError extends RelayError {
  readonly code = 'not_found';
  constructor(message = 'not found') {
    super(message);
  }
}

export class MethodNotAllowedError extends RelayError {
  readonly code = 'method_not_allowed';
  constructor() {
    super('method not allowed');
  }
}

export class StorageUnavailableError extends RelayError {
  readonly code = 'storage_unavailable';
  constructor(options?: ErrorOptions) {
    super('storage cannot commit; retry later', options);
  }
}

export class UnauthorizedError extends RelayError {
  readonly code = 'unauthorized';
  constructor() {
    super('missing or invalid bearer token');
  }
}

export class InvalidRequestError extends RelayError {
  readonly code = 'invalid_request';
}

/** A reconciliation run is going on (on this or another replica): one at a time. */
export class ReconcileInProgressError extends RelayError {
  readonly code = 'reconcile_in_progress';
  constructor() {
    super('a reconciliation run is in progress; see GET /admin/reconcile');
  }
}

export class ReconcileNotConfiguredError extends RelayError {
  readonly code = 'reconcile_not_configured';
  constructor() {
    super('reconciliation needs BOXRELAY_UPSTREAM_BASE_URL and BOXRELAY_UPSTREAM_API_KEY');
  }
}

/** A fault of the relay itself; the cause is logged, never sent. */
export class InternalError extends RelayError {
  readonly code = 'internal_error';
  constructor(options?: ErrorOptions) {
    super('internal error', options);
  }
}
