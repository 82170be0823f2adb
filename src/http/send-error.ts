import type { ServerResponse } from 'node:http';
import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import { InternalError, InvalidRequestError, MethodNotAllowedError, NotFoundError, PayloadTooLargeError, RelayError, type HttpRefusal } from '../errors.js';
import { untrusted, type Logger } from '../log.js';
import { isHttpRefusal, statusByCode } from './status.js';

export interface ErrorBody {
  ok: false;
  code: string;
  message: string;
  requestId: string;
}

/** `{"ok":false,"code","message","requestId"}`: never a secret, a signature or an echo of the body. */
export function errorBody(error: HttpRefusal, requestId: string): ErrorBody {
  return { ok: false, code: error.code, message: error.message, requestId };
}

/** What Express's `res.status(s).json(body)` sends, with plain node:http calls (the receiver's hot path). */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** A refusal; a too-large body also closes the connection (it was not read). */
export function sendRelayError(res: ServerResponse, error: HttpRefusal, requestId: string): void {
  if (error.code === 'payload_too_large') res.setHeader('Connection', 'close');
  sendJson(res, statusByCode[error.code], errorBody(error, requestId));
}

/** The same refusal from an Express handler, under the request id its middleware assigned. */
export function sendError(res: Response, error: HttpRefusal): void {
  sendRelayError(res, error, res.locals.requestId as string);
}

export const notFound: RequestHandler = (_req, res) => sendError(res, new NotFoundError());
/** A 405 for a path served with other methods, which `Allow` names (RFC 9110); GET implies HEAD. */
export function methodNotAllowed(...served: ('GET' | 'POST' | 'DELETE')[]): RequestHandler {
  const allow = served.flatMap((method) => (method === 'GET' ? ['GET', 'HEAD'] : [method])).join(', ');
  return (_req, res) => {
    res.setHeader('Allow', allow);
    sendError(res, new MethodNotAllowedError());
  };
}

/**
 * Any error as an HTTP refusal: Express's own body-parser errors (admin JSON) become their closest
 * code, without their message; anything else (ours without an HTTP meaning included) is an internal error.
 */
export function asRelayError(error: unknown): HttpRefusal {
  if (isHttpRefusal(error)) return error;
  if (error instanceof RelayError) return new InternalError({ cause: error });
  const { type, status } = error as { type?: string; status?: number };
  if (type === 'entity.too.large') return new PayloadTooLargeError(Number((error as { limit?: number }).limit) || 0);
  if (typeof status === 'number' && status >= 400 && status < 500) return new InvalidRequestError('malformed request');
  return new InternalError({ cause: error });
}

/** Last handler: every error answers with a code; internal ones are logged with their cause. */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error: unknown, req: Request, res: Response, next) => {
    if (res.headersSent) return next(error);
    const relayError = asRelayError(error);
    if (relayError instanceof InternalError) {
      logger.error({ err: error, requestId: res.locals.requestId, path: untrusted(req.path) }, 'unhandled error');
    }
    sendError(res, relayError);
  };
}
