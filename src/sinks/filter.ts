import { celEnv, isCelError, parse, plan } from '@bufbuild/cel';
type Expr = ReturnType<typeof parse>['expr'];
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
  /** true only when the expression gives `true`; throws a FilterError otherwise (false, counted). */
  matches(event: CloudEvent): boolean;
}

/** An expression that does not compile (a configuration error naming the hook). */
export class FilterCompileError extends Error {
  readonly code = 'filter_invalid';
}

/** An evaluation that did not give `true` or `false`: counted as false. */
export class FilterError extends Error {
  readonly code = 'filter_error';
}

/** Bounds on the expression itself, checked when it compiles. */
const MAX_EXPRESSION_CHARS = 4096;
const MAX_NESTED_COMPREHENSIONS = 3;
/**
 * Estimated cost units per evaluation (one unit: one node evaluated, about a tenth to a third of a
 * microsecond), so an accepted evaluation stays around a millisecond.
 */
export const FILTER_COST_LIMIT = 10_000;
/** String work costs a unit per this many characters (a call may read its whole argument). */
const CHARS_PER_UNIT = 64;

/** Names an expression may use besides `event`: type names, usable as values (`type(x) == string`). */
const TYPE_NAMES = new Set(['bool', 'bytes', 'double', 'duration', 'dyn', 'int', 'list', 'map', 'null_type', 'string', 'timestamp', 'type', 'uint']);

interface Shape {
  /** Nodes by how many comprehensions enclose them: nodes[0] at the top, nodes[1] inside one, ... */
  nodes: number[];
  /** Calls (which may read a whole string, list or map) by the same depth. */
  calls: number[];
  /** The longest list or map written in the expression. */
  literalSize: number;
}

const env = celEnv();

export function compileFilter(expression: string): EventFilter {
  if (expression.length > MAX_EXPRESSION_CHARS) throw new FilterCompileError(`longer than ${MAX_EXPRESSION_CHARS} characters`);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(expression);
  } catch (error) {
    throw new FilterCompileError(firstLine(error));
  }
  const shape: Shape = { nodes: [], calls: [], literalSize: 0 };
  measure(parsed.expr, shape, 0, new Set(['event']));
  if (shape.nodes.length - 1 > MAX_NESTED_COMPREHENSIONS) {
    throw new FilterCompileError(`comprehensions (all, exists, map, filter) nest more than ${MAX_NESTED_COMPREHENSIONS} deep`);
  }
  let evaluate: ReturnType<typeof plan>;
  try {
    evaluate = plan(env, parsed);
  } catch (error) {
    throw new FilterCompileError(firstLine(error));
  }
  const loops = shape.nodes.length > 1;
  const calls = shape.calls.some((count) => count > 0);
  return {
    expression,
    matches(event) {
      // Events are measured only when the expression has work that grows with them.
      const size = loops || calls ? sizeOf(event) : { collection: 0, chars: 0 };
      const cost = costOf(shape, Math.max(size.collection, shape.literalSize), size.chars);
      if (cost > FILTER_COST_LIMIT) throw new FilterError(`cost limit exceeded (estimated ${Math.round(cost)} > ${FILTER_COST_LIMIT})`);
      let result: unknown;
      try {
        result = evaluate({ event: event as never });
      } catch (error) {
        throw new FilterError(firstLine(error));
      }
      if (isCelError(result)) throw new FilterError(firstLine(result));
      if (typeof result !== 'boolean') throw new FilterError('the expression did not give a bool');
      return result;
    },
  };
}

/** Each node once per iteration of every comprehension around it; a call also per character read. */
function costOf(shape: Shape, collection: number, chars: number): number {
  let cost = 0;
  shape.nodes.forEach((count, depth) => {
    const perCall = 1 + collection + chars / CHARS_PER_UNIT;
    cost += (count + (shape.calls[depth] ?? 0) * perCall) * Math.max(1, collection) ** depth;
  });
  return cost;
}

/** Walks the parsed expression: nodes and calls by comprehension depth; names must be bound. */
function measure(expr: Expr | undefined, shape: Shape, depth: number, bound: Set<string>): void {
  if (expr === undefined) return;
  shape.nodes[depth] = (shape.nodes[depth] ?? 0) + 1;
  shape.calls[depth] ??= 0;
  const kind = expr.exprKind;
  switch (kind.case) {
    case 'identExpr':
      if (!bound.has(kind.value.name) && !TYPE_NAMES.has(kind.value.name)) {
        throw new FilterCompileError(`unknown name ${JSON.stringify(kind.value.name)} (the variable is \`event\`)`);
      }
      return;
    case 'selectExpr':
      return measure(kind.value.operand, shape, depth, bound);
    case 'callExpr':
      shape.calls[depth] += 1;
      measure(kind.value.target, shape, depth, bound);
      return kind.value.args.forEach((arg) => measure(arg, shape, depth, bound));
    case 'listExpr':
      shape.literalSize = Math.max(shape.literalSize, kind.value.elements.length);
      return kind.value.elements.forEach((element) => measure(element, shape, depth, bound));
    case 'structExpr':
      shape.literalSize = Math.max(shape.literalSize, kind.value.entries.length);
      return kind.value.entries.forEach((entry) => {
        if (entry.keyKind.case === 'mapKey') measure(entry.keyKind.value, shape, depth, bound);
        measure(entry.value, shape, depth, bound);
      });
    case 'comprehensionExpr': {
      const loop = kind.value;
      measure(loop.iterRange, shape, depth, bound);
      measure(loop.accuInit, shape, depth, bound);
      const inner = new Set([...bound, loop.iterVar, loop.accuVar, ...(loop.iterVar2 ? [loop.iterVar2] : [])]);
      measure(loop.loopCondition, shape, depth + 1, inner);
      measure(loop.loopStep, shape, depth + 1, inner);
      return measure(loop.result, shape, depth, new Set([...bound, loop.accuVar]));
    }
    default:
      return;
  }
}

/** The longest list or map and the longest string in the event, without recursion. */
function sizeOf(event: CloudEvent): { collection: number; chars: number } {
  let collection = 0;
  let chars = 0;
  const stack: unknown[] = [event];
  while (stack.length > 0) {
    const value = stack.pop();
    if (typeof value === 'string') chars = Math.max(chars, value.length);
    else if (Array.isArray(value)) {
      collection = Math.max(collection, value.length);
      stack.push(...value);
    } else if (typeof value === 'object' && value !== null) {
      const entries = Object.entries(value);
      collection = Math.max(collection, entries.length);
      for (const [key, item] of entries) stack.push(key, item);
    }
  }
  return { collection, chars };
}

const firstLine = (error: unknown): string => String((error as Error).message ?? error).split('\n')[0]!.slice(0, 200);
