import type { Response } from 'express';
import { z } from 'zod';
import type { HttpErrorCode } from '../../errors.js';

/**
 * One admin route as `GET /admin/openapi.json` describes it. The route answers through `reply` with
 * the schema named here, so what it sends and what the document says are one schema.
 */
export interface AdminOperation {
  method: 'get' | 'post' | 'delete';
  /** The path under `/admin`, as Express mounts it (`:name` for a path parameter). */
  path: string;
  summary: string;
  /** What each path parameter is. */
  params?: Record<string, string>;
  /** The query parameters, each optional: a string schema with its description. */
  query?: Record<string, z.ZodType>;
  /** The JSON request body; `required: false` when the route also takes none. */
  body?: { schema: z.ZodType; required: boolean };
  /** Each success status with the schema of its body (`null`: no body). */
  answers: Record<number, z.ZodType | null>;
  /** The error codes this route answers besides `unauthorized` and `internal_error`, which every one may. */
  errors: HttpErrorCode[];
}

type BodySchema<O extends AdminOperation, S extends keyof O['answers']> = Exclude<O['answers'][S], null>;

/**
 * Sends `body` as the operation's answer for `status`, checked by its schema: a field the schema lacks
 * or a value of another shape is an internal error (500, logged), never an answer the document does
 * not describe. The answers' objects are strict for that reason.
 */
export function reply<O extends AdminOperation, S extends keyof O['answers'] & number>(
  res: Response,
  operation: O,
  status: S,
  body: z.input<BodySchema<O, S>>,
): void {
  const schema = operation.answers[status];
  if (!schema) throw new Error(`${operation.method} ${operation.path} has no body for ${status}`);
  res.status(status).json(schema.parse(body));
}

/** A query parameter: an optional string, described. */
export const queryParam = (description: string, values?: readonly [string, ...string[]]) =>
  (values ? z.enum(values) : z.string()).describe(description);

/** `{"ok":true, ...}`: every successful answer with a body. */
export const okAnswer = <S extends z.ZodRawShape>(shape: S) => z.strictObject({ ok: z.literal(true), ...shape });

/** A list's answer: its items under `key` and the cursor of the next page. */
export const pageAnswer = <K extends string, T extends z.ZodType>(key: K, item: T) =>
  okAnswer({ [key]: z.array(item), nextCursor: z.string().nullable().describe('Give as `cursor` for the next page; null at the end.') } as { [P in K]: z.ZodArray<T> } & { nextCursor: z.ZodNullable<z.ZodString> });

/** A time the relay writes: ISO 8601 in UTC. */
export const isoTime = () => z.iso.datetime();
