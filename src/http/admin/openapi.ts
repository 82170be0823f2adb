import { STATUS_CODES } from 'node:http';
import { z } from 'zod';
import type { HttpErrorCode } from '../../errors.js';
import { methodNotAllowed } from '../send-error.js';
import { statusByCode } from '../status.js';
import { listAccountsOperation } from './accounts.js';
import { listAttemptsOperation, resendOperation } from './attempts.js';
import { auditOperation } from './audit.js';
import { forgetBoxOperation, getBoxOperation, listBoxesOperation } from './boxes.js';
import { discardOperation, listDeadLettersOperation, retryAllOperation, retryOperation } from './dead-letters.js';
import { getEventOperation } from './event-deliveries.js';
import { listEventsOperation } from './events.js';
import { eventBodiesOperation, listHooksOperation } from './hook-transforms.js';
import { logOperation } from './log.js';
import { reply, type AdminOperation } from './operation.js';
import { reconcileStatusOperation, startReconcileOperation } from './reconcile.js';
import { replayOperation } from './replay.js';
import type { AdminRoutes } from './router.js';
import { attemptsPerMinuteOperation, failedAttemptsOperation, sinkHealthOperation } from './sink-health.js';
import { listSinksOperation, pauseOperation, resumeOperation } from './sinks.js';
import { statsOperation } from './stats.js';
import { versionOperation } from './version.js';

export type OpenApiDocument = Record<string, unknown> & { openapi: '3.1.0'; info: { title: string; version: string; description: string }; paths: Record<string, Record<string, OpenApiOperation>> };

interface OpenApiOperation {
  operationId: string;
  summary: string;
  parameters?: Record<string, unknown>[];
  requestBody?: Record<string, unknown>;
  responses: Record<string, { description: string; content?: { 'application/json': { schema: JsonSchema } } }>;
}

type JsonSchema = Record<string, unknown>;

export const openApiOperation = {
  method: 'get',
  path: '/openapi.json',
  summary: 'This document: every /admin route, its parameters, request body and answers.',
  answers: {
    200: z.looseObject({ openapi: z.literal('3.1.0'), info: z.looseObject({ title: z.string(), version: z.string() }), paths: z.record(z.string(), z.unknown()) }),
  },
  errors: [],
} as const satisfies AdminOperation;

/**
 * Every admin route may answer these: the token refused, a request body that is not JSON or over
 * 16 KiB (the router parses any JSON body), and an internal error.
 */
const EVERY_ROUTE: HttpErrorCode[] = ['unauthorized', 'invalid_request', 'payload_too_large', 'internal_error'];

/** Drops what each embedded schema would repeat (the dialect is the document's). */
function jsonSchemaOf(schema: z.ZodType, io: 'input' | 'output'): JsonSchema {
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as JsonSchema;
  return rest;
}

const errorSchema = (codes: HttpErrorCode[]) =>
  jsonSchemaOf(
    z.strictObject({ ok: z.literal(false), code: z.enum(codes as [HttpErrorCode, ...HttpErrorCode[]]), message: z.string(), requestId: z.string() }),
    'output',
  );

/** `/events/:id/attempts` -> `/admin/events/{id}/attempts`. */
export const openApiPath = (path: string): string => `/admin${path.replace(/:(\w+)/g, '{$1}')}`;

/** `get` `/events/:id/attempts` -> `getEventsIdAttempts`. */
const operationIdOf = ({ method, path }: AdminOperation): string =>
  method + path.replace(/[^A-Za-z0-9]+(.)?/g, (_m, next: string | undefined) => (next ?? '').toUpperCase());

function responsesOf(operation: AdminOperation): OpenApiOperation['responses'] {
  const responses: OpenApiOperation['responses'] = {};
  for (const [status, schema] of Object.entries(operation.answers)) {
    responses[status] = schema
      ? { description: STATUS_CODES[Number(status)] ?? status, content: { 'application/json': { schema: jsonSchemaOf(schema, 'output') } } }
      : { description: `${STATUS_CODES[Number(status)] ?? status}: no body.` };
  }
  const byStatus = new Map<number, HttpErrorCode[]>();
  for (const code of new Set([...EVERY_ROUTE, ...operation.errors])) {
    const status = statusByCode[code];
    byStatus.set(status, [...(byStatus.get(status) ?? []), code]);
  }
  for (const [status, codes] of [...byStatus].sort(([a], [b]) => a - b)) {
    responses[String(status)] = {
      description: `${STATUS_CODES[status] ?? status}: ${codes.map((code) => `\`${code}\``).join(', ')}.`,
      content: { 'application/json': { schema: errorSchema(codes) } },
    };
  }
  return responses;
}

function openApiOperationOf(operation: AdminOperation): OpenApiOperation {
  const parameters = [
    ...[...operation.path.matchAll(/:(\w+)/g)].map(([, name = '']) => ({
      name,
      in: 'path',
      required: true,
      description: operation.params?.[name] ?? '',
      schema: { type: 'string' },
    })),
    ...Object.entries(operation.query ?? {}).map(([name, schema]) => {
      const { description, ...rest } = jsonSchemaOf(schema, 'input');
      return { name, in: 'query', required: false, description, schema: rest };
    }),
  ];
  return {
    operationId: operationIdOf(operation),
    summary: operation.summary,
    ...(parameters.length > 0 ? { parameters } : {}),
    ...(operation.body
      ? { requestBody: { required: operation.body.required, content: { 'application/json': { schema: jsonSchemaOf(operation.body.schema, 'input') } } } }
      : {}),
    responses: responsesOf(operation),
  };
}

const METHOD_ORDER = ['get', 'post', 'delete'];

/** The OpenAPI 3.1 document of these admin operations (contract section 22), in a stable order. */
export function adminDocument(operations: readonly AdminOperation[], version: string): OpenApiDocument {
  const sorted = [...operations].sort(
    (a, b) => openApiPath(a.path).localeCompare(openApiPath(b.path)) || METHOD_ORDER.indexOf(a.method) - METHOD_ORDER.indexOf(b.method),
  );
  const paths: OpenApiDocument['paths'] = {};
  for (const operation of sorted) {
    const path = openApiPath(operation.path);
    const item = (paths[path] ??= {});
    if (item[operation.method]) throw new Error(`${operation.method} ${path} is described twice`);
    item[operation.method] = openApiOperationOf(operation);
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'boxrelay admin API',
      version,
      description:
        'The admin API on the internal port (9091 by default), on when BOXRELAY_ADMIN_TOKEN is set (404 otherwise). Lists take `limit` (1..200) and `cursor`, and answer `nextCursor` (null at the end). Every error answers `{"ok":false,"code","message","requestId"}`; a method a path does not serve answers 405 `method_not_allowed` with `Allow`.',
    },
    servers: [{ url: '/', description: 'The internal port.' }],
    security: [{ adminToken: [] }],
    components: { securitySchemes: { adminToken: { type: 'http', scheme: 'bearer', description: 'BOXRELAY_ADMIN_TOKEN' } } },
    paths,
  };
}

/** `GET /admin/openapi.json`: the document of the routes mounted beside it, and of itself. */
export function openApiRoutes(routes: readonly AdminRoutes[], version: string): AdminRoutes {
  const operations = [...routes.flatMap((r) => r.operations), openApiOperation];
  const document = adminDocument(operations, version);
  return {
    operations: [openApiOperation],
    mount(router) {
      router.get(openApiOperation.path, (_req, res) => {
        reply(res, openApiOperation, 200, document);
      });
      router.all(openApiOperation.path, methodNotAllowed('GET'));
    },
  };
}

/**
 * Every admin route's operation, without a relay (for `npm run docs`); test/admin-openapi.test.ts
 * checks that a relay mounts exactly these.
 */
export const ADMIN_OPERATIONS: readonly AdminOperation[] = [
  listEventsOperation,
  getEventOperation,
  listAttemptsOperation,
  resendOperation,
  eventBodiesOperation,
  listBoxesOperation,
  getBoxOperation,
  forgetBoxOperation,
  listDeadLettersOperation,
  retryAllOperation,
  retryOperation,
  discardOperation,
  replayOperation,
  startReconcileOperation,
  reconcileStatusOperation,
  listAccountsOperation,
  listHooksOperation,
  listSinksOperation,
  pauseOperation,
  resumeOperation,
  failedAttemptsOperation,
  attemptsPerMinuteOperation,
  sinkHealthOperation,
  logOperation,
  auditOperation,
  statsOperation,
  versionOperation,
  openApiOperation,
];
