import { randomUUID } from 'node:crypto';
import type { RequestHandler } from 'express';

export function newRequestId(): string {
  return `req_${randomUUID().replaceAll('-', '')}`;
}

/** Every response names its request so a user can quote it; the id is echoed in X-Request-Id. */
export const assignRequestId: RequestHandler = (_req, res, next) => {
  const requestId = newRequestId();
  res.locals.requestId = requestId;
  res.setHeader('X-Request-Id', requestId);
  next();
};
