import type { ServerResponse } from 'node:http';
import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import { MethodNotAllowedError, NotFoundError, RelayError } from '../errors.js';
import type { Logger } from '../log.js';
import { statusByCode } from './status.js';

export interface ErrorBody {
  ok: false;
  code: string;
  message: string;
  requestId: string;
}

/** `{"ok":false,"code","message","requestId"}`: never a secret, a signature or an echo of the body. */
export function errorBody(error: RelayError, requestId: string): ErrorBody {
  return { ok: false, code: error.code, message: error.message, requestId };
}

/** What Express's `res.status(s).json(body)` sends, without Express (the receiver's hot path). */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** A refusal on a bare node:http response; a too-large body also closes the connection (it was not read). */
export function sendRelayError(res: ServerResponse, error: RelayError, requestId: string): void {
  if (error.code === 'payload_too_large') res.setHeader('Connection', 'close');
  sendJson(res, statusByCode[error.code], errorBody(error, requestId));
}

export function sendError(res: Response, error: RelayError): void {
  if (error.code === 'payload_too_large') res.set('Connection', 'close');
  res.status(statusByCode[error.code]).json(errorBody(error, res.locals.requestId as string));
}

export const notFound: RequestHandler = (_req, res) => sendError(res, new NotFoundError());
export const methodNotAllowed: RequestHandler = (_req, res) => sendError(res, new MethodNotAllowedError());

/** Anything that is not a RelayError is logged and answered as a plain 500 with this body. */
function unexpected(logger: Logger, error: unknown, requestId: string, path: string) {
  logger.error({ err: error, requestId, path }, 'unhandled error');
  return { ok: false, code: 'internal_error', message: 'internal error', requestId };
}

export function sendUnexpected(logger: Logger, res: ServerResponse, error: unknown, requestId: string, path: string): void {
  sendJson(res, 500, unexpected(logger, error, requestId, path));
}

/** Last handler: known errors keep their code; anything else is logged and answered as a plain 500. */
export function errorHandler(logger: Logger): ErrorRequestHandler {
  return (error: unknown, req: Request, res: Response, next) => {
    if (res.headersSent) return next(error);
    if (error instanceof RelayError) return sendError(res, error);
    // Express's own body and URL errors carry a status; keep it but not their message.
    const status = (error as { status?: number }).status;
    if (typeof status === 'number' && status >= 400 && status < 500) {
      return void res.status(status).json({ ok: false, code: 'invalid_request', message: 'bad request', requestId: res.locals.requestId });
    }
    res.status(500).json(unexpected(logger, error, res.locals.requestId as string, req.path));
  };
}
