import type { ErrorRequestHandler, Request, RequestHandler, Response } from 'express';
import { MethodNotAllowedError, NotFoundError, RelayError } from '../errors.js';
import type { Logger } from '../log.js';
import { statusByCode } from './status.js';

/** `{"ok":false,"code","message","requestId"}`: never a secret, a signature or an echo of the body. */
export function sendError(res: Response, error: RelayError): void {
  if (error.code === 'payload_too_large') res.set('Connection', 'close');
  res.status(statusByCode[error.code]).json({
    ok: false,
    code: error.code,
    message: error.message,
    requestId: res.locals.requestId as string,
  });
}

export const notFound: RequestHandler = (_req, res) => sendError(res, new NotFoundError());
export const methodNotAllowed: RequestHandler = (_req, res) => sendError(res, new MethodNotAllowedError());

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
    logger.error({ err: error, requestId: res.locals.requestId, path: req.path }, 'unhandled error');
    res.status(500).json({ ok: false, code: 'internal_error', message: 'internal error', requestId: res.locals.requestId });
  };
}
