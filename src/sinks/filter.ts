import { isCelError, parse, plan, type CelFunc } from '@bufbuild/cel';
type Expr = NonNullable<ReturnType<typeof parse>['expr']>;
import { RelayError } from '../errors.js';
import { untrusted } from '../log.js';
import type { CloudEvent } from '../events/cloudevent.js';
import { CostMeter, celEventOf, meterComprehensions, meteredEnv, type CelEvent } from './cel-budget.js';

/**
 * A hook's `filter` (contract section 14): a CEL expression over `event`. @bufbuild/cel follows the
 * specification (its conformance suite) and matches regular expressions with RE2, in linear time;
 * its cost is counted as it runs (./cel-budget.ts): past the budget the evaluation stops and the
 * filter counts as an error (false).
 */
export interface EventFilter {
  readonly expression: string;
  /**
   * Whether the expression gives `true` for the event; throws a FilterError when it gives no bool or
   * fails (counted as false). `cel`: the event already made into CEL values, shared by its filters.
   */
  matches(event: CloudEvent, cel?: CelEvent): boolean;
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

/** Names an expression may use besides `event`: type names, usable as values (`type(x) == string`). */
const TYPE_NAMES = new Set(['bool', 'bytes', 'double', 'duration', 'dyn', 'int', 'list', 'map', 'null_type', 'string', 'timestamp', 'type', 'uint']);

export function compileFilter(expression: string): EventFilter {
  const evaluate = compileBounded(expression, {
    variables: ['event'],
    invalid: (message) => new FilterCompileError(message),
    failed: (message) => new FilterError(message),
  });
  return {
    expression,
    matches(event, cel) {
      const result = evaluate(cel ?? celEventOf(event));
      if (typeof result !== 'boolean') throw new FilterError('the expression did not give a bool');
      return result;
    },
  };
}

/** How a bounded expression is compiled and what its errors are (a filter's, a transform's). */
export interface BoundedOptions {
  /** Functions besides CEL's standard ones, given the meter their work is charged to. */
  funcs?: (meter: CostMeter) => CelFunc[];
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
export function compileBounded(expression: string, options: BoundedOptions): (event: CelEvent, variables?: Record<string, unknown>) => unknown {
  if (expression.length > MAX_EXPRESSION_CHARS) throw options.invalid(`longer than ${MAX_EXPRESSION_CHARS} characters`);
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(expression);
  } catch (error) {
    throw options.invalid(firstLine(error));
  }
  if (parsed.expr === undefined) throw options.invalid('an empty expression');
  const shape = meterComprehensions(parsed.expr, (expr, bound) => checkName(expr, bound, options), options.variables);
  if (shape.nesting > MAX_NESTED_COMPREHENSIONS) {
    throw options.invalid(`comprehensions (all, exists, map, filter) nest more than ${MAX_NESTED_COMPREHENSIONS} deep`);
  }
  const meter = new CostMeter();
  let evaluate: ReturnType<typeof plan>;
  try {
    evaluate = plan(meteredEnv(options.funcs?.(meter) ?? [], meter), parsed);
  } catch (error) {
    throw options.invalid(firstLine(error));
  }
  return (event, variables) => {
    let result: unknown;
    // CEL makes an Error for each step that fails (a missing key, no overload), uncharged: without
    // a stack trace one costs about as much as a node.
    const stackTraceLimit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      meter.start(shape.onceNodes);
      result = evaluate({ ...variables, event: event.value as never });
    } catch (error) {
      throw options.failed(firstLine(error));
    } finally {
      Error.stackTraceLimit = stackTraceLimit;
    }
    // A charge past the budget ends the evaluation with an error; a string function's may be caught as a CEL error first.
    if (meter.exceeded) throw options.failed(`cost limit exceeded: the expression's loops, calls and what they build, over this event`);
    if (isCelError(result)) throw options.failed(firstLine(result));
    return result;
  };
}

/** Names must be bound: `event`, the variables, the comprehensions' own, or type names. */
function checkName(expr: Expr, bound: ReadonlySet<string>, options: Pick<BoundedOptions, 'invalid'>): void {
  if (expr.exprKind.case !== 'identExpr') return;
  const name = expr.exprKind.value.name;
  if (!bound.has(name) && !TYPE_NAMES.has(name)) throw options.invalid(`unknown name ${JSON.stringify(name)} (the variable is \`event\`)`);
}

const firstLine = (error: unknown): string => untrusted(String((error as Error).message ?? error).split('\n')[0]!, 200);
