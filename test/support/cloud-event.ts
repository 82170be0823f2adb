import type { CloudEvent } from '../../src/events/cloudevent.js';

/** A CloudEvent as the relay builds it, with the given data: what filters and transforms see. */
export const cloudEvent = (data: Record<string, unknown>, type = 'box.error'): CloudEvent => ({
  specversion: '1.0',
  id: 'evt_1',
  source: 'sandbox',
  type,
  subject: 'bx_1',
  time: '2026-01-01T00:00:00Z',
  datacontenttype: 'application/json',
  data,
  boxrelayaccount: 'default',
});
