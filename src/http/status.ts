import type { ErrorCode } from '../errors.js';

/** The one place where error codes become HTTP statuses; closed, so a new code must be mapped here. */
export const statusByCode: Readonly<Record<ErrorCode, number>> = {
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
