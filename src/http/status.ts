import { HttpRefusal, type HttpErrorCode } from '../errors.js';

/**
 * The one place where error codes become HTTP statuses; closed both ways: a new HTTP code must be
 * mapped here, and a code of another kind (a CLI, storage, upstream or sink failure) cannot be.
 */
export const statusByCode: Readonly<Record<HttpErrorCode, number>> = {
  missing_header: 400,
  duplicate_header: 400,
  malformed_timestamp: 400,
  timestamp_out_of_window: 401,
  payload_too_large: 413,
  malformed_signature: 401,
  invalid_signature: 401,
  invalid_event: 400,
  delivery_id_mismatch: 400,
  not_found: 404,
  method_not_allowed: 405,
  storage_unavailable: 503,
  unauthorized: 401,
  invalid_request: 400,
  reconcile_in_progress: 409,
  reconcile_not_configured: 409,
  internal_error: 500,
};

/**
 * True for a refusal with an HTTP status: an HttpRefusal by class, not by its code's spelling, so a
 * code of another family that reads like an HTTP one (a hook's `invalid_request`) never becomes an
 * answer. Any other error (ours included) answers 500 `internal_error`.
 */
export function isHttpRefusal(error: unknown): error is HttpRefusal {
  return error instanceof HttpRefusal;
}
