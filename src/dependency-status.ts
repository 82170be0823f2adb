/**
 * What a dependency (storage, NATS) reports to readiness, shared by the parts that have one and the
 * internal `/readyz` that shows them, so neither imports the other.
 */

/** `error`: the dependency answers but refuses what the relay needs (e.g. a JetStream stream); `down`: it does not answer. */
export type CheckState = 'ok' | 'down' | 'error';

export interface DependencyStatus {
  state: CheckState;
  /** Why, for `error` (and storage `down`); for `ok`, a refusal of some work that leaves the rest flowing. Safe to show (no secrets). */
  error?: string;
}
