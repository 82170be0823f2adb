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
  /** Operator events name their subject (a sink or a box); upstream events take the box id. */
  subject?: string;
  data: Record<string, unknown> & { box?: { id?: unknown } };
}

/**
 * Builds the CloudEvent from the stored raw payload: `data` unchanged, `subject` the raw box id.
 * An operator event is one the relay wrote (its stored origin), whatever its type says.
 */
export function toCloudEvent(payload: string, source: string, origin: string | null = null): CloudEvent {
  const event = JSON.parse(payload) as StoredPayload;
  const operator = origin === 'operator';
  const subject = operator ? event.subject : event.data.box?.id;
  return {
    specversion: '1.0',
    id: event.id,
    source: operator ? `${source}/boxrelay` : source,
    type: event.type,
    ...(typeof subject === 'string' && subject !== '' ? { subject } : {}),
    time: event.createdAt,
    datacontenttype: 'application/json',
    data: event.data,
    ...(origin === 'history' || origin === 'synthesized' ? { boxrelayorigin: origin } : {}),
  };
}
