import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { UnauthorizedError } from '../../errors.js';
import { sendError } from '../send-error.js';

const digest = (value: string) => createHash('sha256').update(value).digest();

/** `Authorization: Bearer <token>` (any case of `Bearer`), the token compared in constant time (hashing first evens out the lengths). */
export function requireBearer(token: string): RequestHandler {
  const expected = digest(token);
  return (req, res, next) => {
    // The scheme is case-insensitive and followed by one or more spaces (RFC 7235 section 2.1).
    const given = /^bearer +(.+)$/i.exec(req.headers.authorization ?? '')?.[1] ?? '';
    if (given !== '' && timingSafeEqual(digest(given), expected)) return next();
    res.set('WWW-Authenticate', 'Bearer');
    sendError(res, new UnauthorizedError());
  };
}
