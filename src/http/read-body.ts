import type { IncomingMessage } from 'node:http';
import getRawBody from 'raw-body';
import { InvalidEventError, PayloadTooLargeError } from '../errors.js';

/**
 * The exact bytes of the body, refused as soon as it exceeds the limit: a Content-Length over the
 * limit is refused before reading anything, a longer chunked body once the limit is passed.
 */
export async function readBody(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  try {
    return await getRawBody(req, { limit: limitBytes, length: req.headers['content-length'] });
  } catch (error) {
    if ((error as { type?: string }).type === 'entity.too.large') throw new PayloadTooLargeError(limitBytes);
    throw new InvalidEventError('the body could not be read in full');
  }
}
