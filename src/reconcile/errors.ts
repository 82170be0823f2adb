/**
 * Why a reconciliation run, or its repair of one box, failed; one class per failure, each with a
 * stable `code` that the run report's `error` starts with. Messages cut untrusted values short.
 */
export type ReconcileFailureCode = 'upstream_cursor_loop' | 'invalid_history_record' | 'reconcile_lease_lost';

export abstract class ReconcileFailure extends Error {
  abstract readonly code: ReconcileFailureCode;

  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** A page's `nextCursor` came back as one already followed: paging would never end. */
export class CursorLoopError extends ReconcileFailure {
  readonly code = 'upstream_cursor_loop';
  constructor(operation: string) {
    super(`${operation}: the upstream returned a cursor it had already given; paging stopped`);
  }
}

/** A record of a box's event history does not have the delivery payload's shape. */
export class InvalidHistoryRecordError extends ReconcileFailure {
  readonly code = 'invalid_history_record';
  constructor(boxId: string, index: number, problem: string) {
    super(`history of box ${cut(boxId)}, record ${index}: ${problem}`);
  }
}

/** Another replica took the run's lease (this one stalled past its expiry): it stops, keeping what it took. */
export class LeaseLostError extends ReconcileFailure {
  readonly code = 'reconcile_lease_lost';
  constructor() {
    super('the reconciliation lease expired and was taken over; this run stopped');
  }
}

/** Untrusted text, cut to a short prefix for messages and logs. */
export function cut(text: string, max = 64): string {
  return text.length <= max ? text : `${text.slice(0, max)}…(${text.length} chars)`;
}
