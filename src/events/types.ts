/** The event types of the upstream's webhooks (sandbox-api-v1.md, "Events"). */
export const BOX_EVENT_TYPES = ['box.ready', 'box.error', 'box.archived', 'box.hydrated'] as const;

/** An event as stored: its body as received and who brought it (what a hook's filter is built from). */
export interface StoredEvent {
  payload: string;
  origin?: string | null | undefined;
  /** The account it is of (contract section 21); absent: `default`. */
  account?: string | undefined;
}
