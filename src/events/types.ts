/** The event types of the upstream's webhooks (sandbox-api-v1.md, "Events"). */
export const BOX_EVENT_TYPES = ['box.ready', 'box.error', 'box.archived', 'box.hydrated'] as const;
