import { celEnv, isCelError, parse, plan, type CelEnv } from '@bufbuild/cel';
type Expr = ReturnType<typeof parse>['expr'];
import { RelayError } from '../errors.js';
import { untrusted } from '../log.js';
import type { CloudEvent } from '../events/cloudevent.js';

/**
 * A hook's `filter` (contract section 14): a CEL expression over `event`. @bufbuild/cel follows the
 * specification (its conformance suite) and matches regular expressions with RE2, in linear time;
 * it has no cost limit of its own, so one is kept here. At compile time the expression's shape is
 * measured (how many nodes, how deep its comprehensions nest); before each evaluation the event's
 * (its longest list or map, its longest string). The product bounds the work an evaluation can do:
 * past the budget the event is not evaluated and the filter counts as an error (false).
 */
export interface EventFilter {
  readonly expression: string;
  /**
   * Whether the expression gives `true` for the event; throws a FilterError when it gives no bool or
   * fails (counted as false). `size` (the event's JSON length, when known) bounds its lists and
   * strings, which spares measuring a small event.
   */
  matches(event: CloudEvent, size?: number): boolean;
}

/** An expression that does not compile (a configuration error naming the hook). */
export class FilterCompileError extends RelayError {
  readonly code = 'filter_invalid';
}

/** An evaluation that did not give `true` or `false`: counted as false. */
export class FilterError extends RelayError {
  readonly code = 'filter_error';
}

/** Bounds on the expression itself, checked when it compiles. */
const MAX_EXPRESSION_CHARS = 4096;
const MAX_NESTED_COMPREHENSIONS = 3;
/**
 * Estimated cost units per evaluation (one unit: about one node evaluated, 0.05 to 0.1 µs), so an
 * accepted evaluation stays within about a millisecond.
 */
export const FILTER_COST_LIMIT = 10_000;
/** A call may read a whole string, list or map: a unit per this many characters or items. */
const ITEMS_PER_UNIT = 64;
/** `matches` (RE2, linear time but slow in JavaScript): a fixed price and a price per character. */
const MATCHES_UNITS = { call: 1000, perChar: 4 };

/** Names an expression may use besides `event`: type names, usable as values (`type(x) == string`). */
const TYPE_NAMES = new Set(['bool', 'bytes', 'double', 'duration', 'dyn', 'int', 'list', 'map', 'null_type', 'string', 'timestamp', 'type', 'uint']);

interface Shape {
  /** Nodes by how many comprehensions enclose them: nodes[0] at the top, nodes[1] inside one, ... */
  nodes: number[];
  /** Calls (which may read a whole string, list or map) by the same depth. */
  calls: number[];
  /** `matches` calls by the same depth. */
  regexes: number[];
  /** The longest list or map written in the expression. */
  literalSize: number;
}

const filterEnv = celEnv();

export function compileFilter(expression: string): EventFilter {
  const evaluate = compileBounded(expression, {
    env: filterEnv,
    variables: ['event'],
    invalid: (message) => new FilterCompileError(message),
    failed: (message) => new FilterError(message),
  });
  return {
    expression,
    matches(event, size) {
      const result = evaluate(event, size);
      if (typeof result !== 'boolean') throw new FilterError('the expression did not give a bool');
      return result;
    },
  };
}

/** How a bounded expression is compiled and what its errors are (a filter's, a transform's). */
export interface BoundedOptions {
  env: CelEnv;
  /** The names the expression may use, `event` first. */
  variables: readonly string[];
  /** An expression that does not compile, or is too big. */
  invalid(message: string): Error;
  /** An evaluation that failed: a missing field, a wrong type, the cost limit. */
  failed(message: string): Error;
}

/**
 * Compiles an expression over `event` (and the other `variables`) under the cost limit: the
 * evaluation gives the CEL value, or throws `failed` (an error, or past the budget).
 */
export function compileBounded(
  expression: string,
  options: BoundedOptions,
): (event: CloudEvent, size?: number, variables?: Record<string, unknown>, celEvent?: unknown) => unknown {
  if (expression.length > MAX_EXPRESSION_CHARS) throw options.invalid(`longer than ${MAX_EXPRESSION_CHARS} characters`);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(expression);
  } catch (error) {
    throw options.invalid(firstLine(error));
  }
  const shape: Shape = { nodes: [], calls: [], regexes: [], literalSize: 0 };
  measure(parsed.expr, shape, 0, new Set(options.variables), options);
  if (shape.nodes.length - 1 > MAX_NESTED_COMPREHENSIONS) {
    throw options.invalid(`comprehensions (all, exists, map, filter) nest more than ${MAX_NESTED_COMPREHENSIONS} deep`);
  }
  let evaluate: ReturnType<typeof plan>;
  try {
    evaluate = plan(options.env, parsed);
  } catch (error) {
    throw options.invalid(firstLine(error));
  }
  const within = (collection: number, chars: number) => costOf(shape, Math.max(collection, shape.literalSize), chars) <= FILTER_COST_LIMIT;
  // `celEvent`: the event already made into CEL values, evaluated in its place (it is measured as JSON).
  return (event, size, variables, celEvent) => {
    // The JSON's length bounds every list and string in it: a small event needs no measuring.
    if (size === undefined || !within(size, size)) {
      const measured = sizeOf(event, within);
      if (!within(measured.collection, measured.chars)) {
        throw options.failed(`cost limit exceeded: the expression's loops and calls over this event's lists and strings`);
      }
    }
    let result: unknown;
    try {
      result = evaluate({ ...variables, event: (celEvent ?? event) as never });
    } catch (error) {
      throw options.failed(firstLine(error));
    }
    if (isCelError(result)) throw options.failed(firstLine(result));
    return result;
  };
}

/**
 * Each node once per iteration of every comprehension around it (each ranging, at worst, over the
 * longest list or map); a call also per item or character it may read.
 */
function costOf(shape: Shape, collection: number, chars: number): number {
  const perCall = (collection + chars) / ITEMS_PER_UNIT;
  const perRegex = MATCHES_UNITS.call + MATCHES_UNITS.perChar * chars;
  let cost = 0;
  shape.nodes.forEach((count, depth) => {
    const work = count + (shape.calls[depth] ?? 0) * perCall + (shape.regexes[depth] ?? 0) * perRegex;
    cost += work * Math.max(1, collection) ** depth;
  });
  return cost;
}

/** Walks the parsed expression: nodes and calls by comprehension depth; names must be bound. */
function measure(expr: Expr | undefined, shape: Shape, depth: number, bound: Set<string>, options: Pick<BoundedOptions, 'invalid'>): void {
  if (expr === undefined) return;
  shape.nodes[depth] = (shape.nodes[depth] ?? 0) + 1;
  const kind = expr.exprKind;
  switch (kind.case) {
    case 'identExpr':
      if (!bound.has(kind.value.name) && !TYPE_NAMES.has(kind.value.name)) {
        throw options.invalid(`unknown name ${JSON.stringify(kind.value.name)} (the variable is \`event\`)`);
      }
      return;
    case 'selectExpr':
      return measure(kind.value.operand, shape, depth, bound, options);
    case 'callExpr': {
      const counts = kind.value.function === 'matches' ? shape.regexes : shape.calls;
      counts[depth] = (counts[depth] ?? 0) + 1;
      measure(kind.value.target, shape, depth, bound, options);
      return kind.value.args.forEach((arg) => measure(arg, shape, depth, bound, options));
    }
    case 'listExpr':
      shape.literalSize = Math.max(shape.literalSize, kind.value.elements.length);
      return kind.value.elements.forEach((element) => measure(element, shape, depth, bound, options));
    case 'structExpr':
      shape.literalSize = Math.max(shape.literalSize, kind.value.entries.length);
      return kind.value.entries.forEach((entry) => {
        if (entry.keyKind.case === 'mapKey') measure(entry.keyKind.value, shape, depth, bound, options);
        measure(entry.value, shape, depth, bound, options);
      });
    case 'comprehensionExpr': {
      const loop = kind.value;
      measure(loop.iterRange, shape, depth, bound, options);
      measure(loop.accuInit, shape, depth, bound, options);
      const inner = new Set([...bound, loop.iterVar, loop.accuVar, ...(loop.iterVar2 ? [loop.iterVar2] : [])]);
      measure(loop.loopCondition, shape, depth + 1, inner, options);
      measure(loop.loopStep, shape, depth + 1, inner, options);
      return measure(loop.result, shape, depth, new Set([...bound, loop.accuVar]), options);
    }
    default:
      return;
  }
}

/**
 * The longest list or map and the longest string in the event, without recursion; it stops as soon
 * as they are too big for `within`, so a large event costs no more than a small one to refuse.
 */
function sizeOf(event: CloudEvent, within: (collection: number, chars: number) => boolean): { collection: number; chars: number } {
  let collection = 0;
  let chars = 0;
  const stack: unknown[] = [event];
  while (stack.length > 0 && within(collection, chars)) {
    const value = stack.pop();
    if (typeof value === 'string') chars = Math.max(chars, value.length);
    else if (Array.isArray(value)) {
      collection = Math.max(collection, value.length);
      if (within(collection, chars)) for (const item of value) stack.push(item);
    } else if (typeof value === 'object' && value !== null) {
      const keys = Object.keys(value);
      collection = Math.max(collection, keys.length);
      if (within(collection, chars)) for (const key of keys) stack.push(key, (value as Record<string, unknown>)[key]);
    }
  }
  return { collection, chars };
}

const firstLine = (error: unknown): string => untrusted(String((error as Error).message ?? error).split('\n')[0]!, 200);
