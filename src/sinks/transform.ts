import { celFunc, celMethod, CelScalar, isCelList, isCelMap, isCelUint, listType, type CelFunc } from '@bufbuild/cel';
import { strings } from '@bufbuild/cel/ext';
import { RelayError } from '../errors.js';
import type { CloudEvent } from '../events/cloudevent.js';
import { BUILTIN_TRANSFORMS } from './builtin-formats.js';
import { celEventOf, type CostMeter, type EventParts } from './cel-budget.js';
import { compileBounded } from './filter.js';
import { EventFailure } from './failures.js';

/**
 * A hook's `transform` (contract section 17): a CEL expression over `event` whose value is the
 * request body. It runs under the filters' cost limit, which counts what its functions build;
 * besides, the body it gives is bounded, so no expression can grow a body without end (a list of
 * the event's lists).
 */
export interface HookTransform {
  readonly expression: string;
  /**
   * The body for the event, or null to send nothing; throws a TransformFailedError. `size` (the
   * event's JSON length, when known) bounds the body's.
   */
  bodyOf(event: CloudEvent, size?: number): TransformedBody | null;
}

export interface TransformedBody {
  body: string;
  contentType: string;
}

/** A transform that does not compile (a configuration error naming the hook). */
export class TransformCompileError extends RelayError {
  readonly code = 'transform_invalid';
}

/** The transform failed on this event (a missing field, a wrong type, the cost limit): a dead letter at once. */
export class TransformFailedError extends EventFailure {
  constructor(message: string) {
    super('transform_failed', message);
  }
}

/** A body may be this much larger than the event it is made from (it may hold the event and more). */
const BODY_CHARS = { perEventChar: 4, base: 64 * 1024 };

const { STRING, INT, DYN } = CelScalar;

/**
 * Markdown and mentions made inert for chat targets (Discord, Teams), while names and ids read as
 * they are: a backslash (CommonMark's escape, Discord's too) before `\ * ~ ` | [ ] ( ) < > @`
 * (emphasis, code, spoilers, quotes, links, `<@id>`, `<at>`, `@everyone`), before `_` unless it
 * stands alone between two ASCII letters or digits (`bx_abc` cannot emphasize; `_x_`, `a__b` can),
 * and before the `:` of `://` (no `https://` a client turns into a link); line breaks become spaces
 * (the text never starts a line, so no list, heading or quote starts).
 */
export function escapeMarkdown(text: string): string {
  return text.replace(/[\r\n]+/g, ' ').replace(/[\\*~`|[\]()<>@]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|:(?=\/\/)/g, '\\$&');
}

/** At most `max` characters (code points), with `…` in place of the rest. */
export function truncate(text: string, max: number): string {
  if (text.length <= max) return text;
  const points = [...text];
  return points.length <= max ? text : `${points.slice(0, Math.max(0, max - 1)).join('')}…`;
}

/**
 * CEL's `replace` (all, or the first n; an empty `old` matches between characters), in linear time
 * (the extension's rebuilds the string at each match), its result's length charged before it is made:
 * a short text and replacement can make a long one.
 */
function replace(text: string, old: string, replacement: string, n: number, meter: CostMeter): string {
  const parts = old === '' ? ['', ...text, ''] : text.split(old);
  const count = n < 0 ? parts.length - 1 : Math.min(n, parts.length - 1);
  meter.chargeChars(text.length + count * (replacement.length - old.length));
  if (count === parts.length - 1) return parts.join(replacement);
  return `${parts.slice(0, count + 1).join(replacement)}${old}${parts.slice(count + 1).join(old)}`;
}

/**
 * The functions a transform may call: CEL's standard ones, the strings extension (its `format`
 * aside: this version gives wrong text for some clauses) and the relay's escapes. The meter
 * charges what each gives; `replace` charges its result before making it.
 */
function transformFuncs(meter: CostMeter): CelFunc[] {
  return [
    ...strings.filter((func) => func.name !== 'format' && func.name !== 'replace' && func.name !== 'join'),
    celMethod('replace', STRING, [STRING, STRING], STRING, function (old, replacement) {
      return replace(this, old, replacement, -1, meter);
    }),
    celMethod('replace', STRING, [STRING, STRING, INT], STRING, function (old, replacement, n) {
      return replace(this, old, replacement, Number(n), meter);
    }),
    celMethod('join', listType(DYN), [], STRING, function () {
      return joined(this.values(), '');
    }),
    celMethod('join', listType(DYN), [STRING], STRING, function (separator) {
      return joined(this.values(), separator);
    }),
    celFunc('escapeMarkdown', [STRING], STRING, escapeMarkdown),
    celFunc('truncate', [STRING, INT], STRING, (text, max) => truncate(text, Math.max(1, Number(max)))),
  ];
}

/** A list of strings joined (CEL's `join`: any other item is an error). */
function joined(list: Iterable<unknown>, separator: string): string {
  const items = [...list];
  if (!items.every((item) => typeof item === 'string')) throw new Error('invalid argument to function join: list contains non-string value');
  return items.join(separator);
}

export interface TransformOptions {
  /** Names besides `event` a built-in transform uses (pagerduty's `routingKey`), with their values. */
  variables?: Record<string, string>;
  /** Replaces the Content-Type the value's kind gives. */
  contentType?: string | undefined;
}

/** Compiles a transform once; its evaluations are bounded as filters' are. */
export function compileTransform(expression: string, options: TransformOptions = {}): HookTransform {
  const variables = options.variables ?? {};
  const evaluate = compileBounded(expression, {
    funcs: transformFuncs,
    variables: ['event', ...Object.keys(variables)],
    invalid: (message) => new TransformCompileError(message),
    failed: (message) => new TransformFailedError(message),
  });
  return {
    expression,
    bodyOf(event, size) {
      const tree = celEventOf(event);
      const value = evaluate(tree, variables);
      if (value === null) return null;
      if (typeof value === 'string') return { body: value, contentType: options.contentType ?? 'text/plain; charset=utf-8' };
      if (!isCelMap(value) && !isCelList(value)) {
        throw new TransformFailedError(`the expression gave a ${typeof value === 'bigint' ? 'int' : typeof value}: a map, a list, a string or null is a body`);
      }
      const budget = { chars: (size ?? 0) * BODY_CHARS.perEventChar + BODY_CHARS.base };
      return { body: JSON.stringify(toJson(value, budget, tree.parts)), contentType: options.contentType ?? 'application/json' };
    },
  };
}

/**
 * A CEL value as JSON: maps with string keys, lists, strings, numbers (ints within 2^53), bools and
 * null. Anything else (bytes, a timestamp, a duration, NaN) fails the transform, as does a body
 * past its budget (strings and values counted as they are met, so a shared list counts each time).
 */
function toJson(value: unknown, budget: { chars: number }, parts: EventParts): unknown {
  const spend = (chars: number) => {
    budget.chars -= chars;
    if (budget.chars < 0) throw new TransformFailedError('cost limit exceeded: the body is too large');
  };
  const part = typeof value === 'object' && value !== null ? parts.get(value) : undefined;
  if (part !== undefined) {
    spend(part.chars);
    return part.json;
  }
  spend(1);
  if (value === null || typeof value === 'boolean') return value;
  if (typeof value === 'string') {
    spend(value.length);
    return value;
  }
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TransformFailedError(`${value} is not a JSON number`);
    return value;
  }
  if (typeof value === 'bigint' || isCelUint(value)) {
    const n = typeof value === 'bigint' ? value : value.value;
    if (n > BigInt(Number.MAX_SAFE_INTEGER) || n < BigInt(Number.MIN_SAFE_INTEGER)) throw new TransformFailedError(`${n} is beyond the integers JSON numbers hold exactly`);
    return Number(n);
  }
  if (isCelList(value)) return [...value.values()].map((item) => toJson(item, budget, parts));
  if (isCelMap(value)) {
    // No prototype: a `__proto__` key is a key like any other.
    const object: Record<string, unknown> = Object.create(null);
    for (const [key, item] of value.entries()) {
      if (typeof key !== 'string') throw new TransformFailedError('a map key is not a string: JSON object keys are strings');
      spend(key.length);
      object[key] = toJson(item, budget, parts);
    }
    return object;
  }
  if (value instanceof Uint8Array) throw new TransformFailedError('bytes are not JSON: give a string');
  throw new TransformFailedError('a value that is not JSON (a timestamp or duration: give a string)');
}

/** What of a hook's configuration decides its transform. */
export interface TransformedHook {
  format: string;
  transform?: string | undefined;
  routingKey?: string | undefined;
  contentType?: string | undefined;
}

/** The CEL source of the hook's transform: its own, or its built-in format's; undefined for `cloudevents` and `slack`. */
export const transformSourceOf = (hook: TransformedHook): string | undefined => hook.transform ?? (BUILTIN_TRANSFORMS as Record<string, string>)[hook.format];

/** The hook's transform, compiled; undefined for `cloudevents` and `slack`. */
export function hookTransformOf(hook: TransformedHook): HookTransform | undefined {
  const expression = transformSourceOf(hook);
  if (expression === undefined) return undefined;
  const variables: Record<string, string> = hook.format === 'pagerduty' ? { routingKey: hook.routingKey ?? '' } : {};
  return compileTransform(expression, { variables, contentType: hook.contentType });
}
