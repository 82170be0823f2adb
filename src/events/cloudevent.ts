/** The normalized event of contract section 3 (CloudEvents 1.0, structured JSON). */
export interface CloudEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  subject?: string;
  time: string;
  datacontenttype: 'application/json';
  data: Record<string, unknown>;
  /** Extension attribute: how a reconciliation run found the event; absent on received webhooks. */
  boxrelayorigin?: string;
}

interface StoredPayload {
  id: string;
  type: string;
  createdAt: string;
  data: Record<string, unknown> & { box?: { id?: unknown } };
}

/** Builds the CloudEvent from the stored raw payload: `data` unchanged, `subject` the raw box id. */
export function toCloudEvent(payload: string, source: string, origin: string | null = null): CloudEvent {
  const event = JSON.parse(payload) as StoredPayload;
  const boxId = event.data.box?.id;
  return {
    specversion: '1.0',
    id: event.id,
    source,
    type: event.type,
    ...(typeof boxId === 'string' && boxId !== '' ? { subject: boxId } : {}),
    time: event.createdAt,
    datacontenttype: 'application/json',
    data: event.data,
    ...(origin === null ? {} : { boxrelayorigin: origin }),
  };
}
