import { RelayError, type UpstreamErrorCode } from '../errors.js';

/**
 * Failures of calls to the Sandbox Service API, one class per failure, each with a stable `code`
 * (the `boxrelay upstream ...` CLI and its scripts branch on it). Messages are built by the client
 * from sanitized parts: they never carry the API key, a webhook secret or a raw response body.
 */
export abstract class UpstreamError extends RelayError {
  abstract override readonly code: UpstreamErrorCode;
}

export interface UpstreamApiErrorInit {
  /** e.g. `GET /webhooks/wh_...`, relative to the v1 root. */
  operation: string;
  status: number;
  /** The upstream's own code (`not_found`, `rate_limited`...), or `http_<status>` when the body had none. */
  upstreamCode: string;
  upstreamMessage: string;
  requestId?: string | undefined;
  details?: unknown;
  /** From `Retry-After`, when the upstream sent one. */
  retryAfterMs?: number | undefined;
}

/** The upstream answered with a non-2xx status (HTTP status is authoritative, the body may be anything). */
export class UpstreamApiError extends UpstreamError {
  readonly code = 'upstream_api_error';
  readonly operation: string;
  readonly status: number;
  readonly upstreamCode: string;
  readonly upstreamMessage: string;
  readonly requestId: string | undefined;
  readonly details: unknown;
  readonly retryAfterMs: number | undefined;

  constructor(init: UpstreamApiErrorInit) {
    // requestId goes into the message because the API asks to quote it in support requests.
    const support = init.requestId ? ` (requestId ${init.requestId})` : '';
    super(
      `Sandbox Service refused ${init.operation}: ${init.status} ${init.upstreamCode}: ${init.upstreamMessage}${support}`,
    );
    this.operation = init.operation;
    this.status = init.status;
    this.upstreamCode = init.upstreamCode;
    this.upstreamMessage = init.upstreamMessage;
    this.requestId = init.requestId;
    this.details = init.details;
    this.retryAfterMs = init.retryAfterMs;
  }
}

/** No HTTP answer: connection refused/reset, DNS failure, TLS failure or timeout. */
export class UpstreamUnreachableError extends UpstreamError {
  readonly code = 'upstream_unreachable';

  constructor(
    readonly operation: string,
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(`Sandbox Service unreachable for ${operation}: ${reason}`, options);
  }
}

/**
 * A non-idempotent call (POST, PATCH) may have been applied but its answer never arrived. It is not
 * retried: a second POST /webhooks would create a second endpoint, and the lost secret of a create or
 * rotate cannot be read back. `guidance` tells the user what to check before trying again.
 */
export class UpstreamResponseLostError extends UpstreamError {
  readonly code = 'upstream_response_lost';

  constructor(
    readonly operation: string,
    readonly reason: string,
    readonly guidance: string,
    options?: ErrorOptions,
  ) {
    super(`The response to ${operation} was lost (${reason}); the change may or may not have been applied. ${guidance}`, options);
  }
}

/** A 2xx answer whose body is not JSON or lacks the expected fields. */
export class UpstreamInvalidResponseError extends UpstreamError {
  readonly code = 'upstream_invalid_response';

  constructor(
    readonly operation: string,
    readonly status: number,
    /** Where the body went wrong: zod issue paths and kinds only, never values (they may hold a secret). */
    readonly problem: string,
    /** Set for create/rotate: the change was applied even though the answer is unusable. */
    readonly guidance?: string,
  ) {
    super(`Sandbox Service sent an unexpected ${status} response to ${operation}: ${problem}${guidance ? `. ${guidance}` : ''}`);
  }
}

/** Refused before any request: the id would otherwise be pasted into the URL path. */
export class InvalidWebhookIdError extends UpstreamError {
  readonly code = 'invalid_webhook_id';

  constructor(shown: string) {
    super(`invalid webhook id ${shown}: expected wh_ followed by 24 lowercase hex characters`);
  }
}
