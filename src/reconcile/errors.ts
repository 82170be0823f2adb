import { RelayError, type ReconcileFailureCode } from '../errors.js';

/**
 * Why a reconciliation run, or its repair of one box, failed; one class per failure, each with a
 * stable `code`. Messages cut untrusted values short.
 */
export abstract class ReconcileFailure extends RelayError {
  abstract override readonly code: ReconcileFailureCode;
}

/** A page's `nextCursor` came back as one already followed: paging would never end. */
export class CursorLoopError extends ReconcileFailure {
  readonly code = 'upstream_cursor_loop';
  constructor(operation: string) {
    super(`${operation}: the upstream returned a cursor it had already given; paging stopped`);
  }
}

/**
 * The run could not renew its lease (it expired, another replica took it, or the database did not
 * answer for as long as it lasts): another run may have started, so this one stopped before its next
 * write, keeping what it took.
 */
export class LeaseLostError extends ReconcileFailure {
  readonly code = 'reconcile_lease_lost';
  constructor() {
    super('the reconciliation lease could not be renewed (it expired or was taken over, or the database did not answer); this run stopped before its next write');
  }
}

/** A run needed more pages or more time than its bounds allow (contract section 9): it ends failed, keeping what it took. */
export class RunBoundError extends ReconcileFailure {
  readonly code = 'reconcile_bound_reached';
  constructor(setting: 'BOXRELAY_RECONCILE_MAX_PAGES' | 'BOXRELAY_RECONCILE_MAX_DURATION', limit: string) {
    super(`the run reached ${setting} (${limit}) before it was done; it stopped, keeping what it took`);
  }
}
