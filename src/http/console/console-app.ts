import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import express, { type RequestHandler, type Router } from 'express';

/**
 * The page runs only the relay's own files: no inline script or style, no other host, no framing,
 * and no form may submit anywhere (the sign-in form is handled by script; without it, the token
 * must not end up in a URL).
 */
export const CONSOLE_CSP = "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

const securityHeaders: RequestHandler = (_req, res, next) => {
  res.set({
    'Content-Security-Policy': CONSOLE_CSP,
    'X-Frame-Options': 'DENY',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'Cache-Control': 'no-cache',
  });
  next();
};

/** `dist/console` of this package, found from this file in src/ (tests) or in dist/src/ (built). */
export function consoleAssetsDir(from = import.meta.dirname): string {
  let dir = from;
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no package.json above ${from}`);
    dir = parent;
  }
  return join(dir, 'dist', 'console');
}

/** `GET /console` (the page) and `/console/*` (its script and style), built by `npm run build`. */
export function createConsoleRouter(assetsDir = consoleAssetsDir()): Router {
  const router = express.Router();
  router.use(securityHeaders);
  // Unbuilt assets fall through to the 404 of everything else.
  router.get('/', (_req, res, next) => res.sendFile(join(assetsDir, 'index.html'), (error) => error && next()));
  router.use(express.static(assetsDir, { index: false, redirect: false }));
  return router;
}
