import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { UnauthorizedError } from '../../errors.js';
import { sendError } from '../send-error.js';

const digest = (value: string) => createHash('sha256').update(value).digest();

/** `Authorization: Bearer <token>`, compared in constant time (hashing first evens out the lengths). */
export function requireBearer(token: string): RequestHandler {
  const expected = digest(token);
  return (req, res, next) => {
    const header = req.headers.authorization ?? '';
    const given = header.startsWith('Bearer ') ? header.slice('Bearer '.length) : '';
    if (given !== '' && timingSafeEqual(digest(given), expected)) return next();
    res.set('WWW-Authenticate', 'Bearer');
    sendError(res, new UnauthorizedError());
  };
}
