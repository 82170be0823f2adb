import { celEnv, celFunc, celList, celMap, CelScalar, isCelList, isCelMap, listType, type CelEnv, type CelFunc, type parse } from '@bufbuild/cel';
import type { CloudEvent } from '../events/cloudevent.js';

/**
 * The cost bound of filters and transforms (contract section 14), counted while the expression
 * runs: what it reads and what it builds, not what the event holds. @bufbuild/cel has no cost limit
 * of its own, so every function call goes through a meter (its arguments' and result's sizes: the
 * lists and strings `+`, `split`, `join`, `replace`, `map` and `filter` make are counted as they are
 * made), and each comprehension is charged, before it starts, for its range's size times the nodes
 * of its body. Past the budget the meter throws, which ends the whole evaluation at once.
 */

type Expr = NonNullable<ReturnType<typeof parse>['expr']>;
type FuncResolver = CelEnv['funcs'];
type FuncGroup = NonNullable<ReturnType<FuncResolver['find']>>;

/** Units one evaluation may spend: one unit is about one node evaluated (0.05 to 0.1 µs), so about a millisecond. */
export const COST_LIMIT = 10_000;
/** A call is charged a unit per this many characters it reads or makes (strings, bytes). */
export const CHARS_PER_UNIT = 64;
/** ... and a unit per this many items of the lists and maps it reads or makes (each passes through the library's generators). */
const ITEMS_PER_UNIT = 2;
/** `matches` (RE2, linear time but slow in JavaScript): a fixed price and a price per character. */
const MATCHES_UNITS = { call: 1000, perChar: 4 };
/** Functions that compare values in depth (equality, `in`): each nested item they may read is charged before they run. */
const DEEP_READERS = new Set(['_==_', '_!=_', '@in']);
/** The call the comprehensions' ranges are wrapped in; no expression can name it (`@` starts no CEL name). */
const ITERATIONS = '@iterations';

export class CostMeter {
  private spent = 0;

  /** A new evaluation, which starts with the nodes evaluated once. */
  start(units: number): void {
    this.spent = 0;
    this.charge(units);
  }

  get exceeded(): boolean {
    return this.spent > COST_LIMIT;
  }

  /** Throws once the budget is spent (and on every charge after). */
  charge(units: number): void {
    this.spent += units;
    if (this.exceeded) throw new Error('cost limit exceeded');
  }

  chargeChars(chars: number): void {
    this.charge(chars / CHARS_PER_UNIT);
  }
}

/** What reading or making a value costs, at its top level. */
function weightOf(value: unknown, itemsPerUnit = ITEMS_PER_UNIT): number {
  if (typeof value === 'string' || value instanceof Uint8Array) return value.length / CHARS_PER_UNIT;
  if (isCelList(value) || isCelMap(value)) return value.size / itemsPerUnit;
  return 0;
}

/** The weight of a value with all it holds (each item a unit: equality compares item by item), walked only until it passes `cap`. */
function deepWeightOf(value: unknown, cap: number): number {
  let weight = 0;
  const stack = [value];
  while (stack.length > 0 && weight <= cap) {
    const item = stack.pop();
    weight += weightOf(item, 1);
    if (weight > cap) break;
    if (isCelList(item)) for (const inner of item) stack.push(inner);
    else if (isCelMap(item)) for (const [key, inner] of item.entries()) stack.push(key, inner);
  }
  return weight;
}

const sizeOfRange = (range: unknown): number => (isCelList(range) || isCelMap(range) ? range.size : 0);

function priceOf(name: string, target: unknown, args: readonly unknown[]): number {
  const values = target === undefined ? args : [target, ...args];
  if (name === 'matches') {
    const chars = values.reduce<number>((sum, value) => sum + (typeof value === 'string' ? value.length : 0), 0);
    return MATCHES_UNITS.call + MATCHES_UNITS.perChar * chars;
  }
  const weigh = DEEP_READERS.has(name) ? (value: unknown) => deepWeightOf(value, COST_LIMIT) : weightOf;
  return values.reduce<number>((sum, value) => sum + weigh(value), 1);
}

/** Each call charged before it runs (what it reads) and after (what it made). */
function meteredGroup(group: FuncGroup, meter: CostMeter): FuncGroup {
  return Object.create(group, {
    call: {
      value: (id: number, target: Parameters<FuncGroup['call']>[1], args: Parameters<FuncGroup['call']>[2]) => {
        meter.charge(priceOf(group.name, target, args));
        const result = group.call(id, target, args);
        meter.charge(weightOf(result));
        return result;
      },
    },
  }) as FuncGroup;
}

/** A comprehension's range, charged its size times the nodes its body evaluates at each turn. */
function iterationsGroup(meter: CostMeter): FuncGroup {
  return {
    name: ITERATIONS,
    *[Symbol.iterator]() {},
    call(_id, _target, [range, bodyNodes]) {
      meter.charge(sizeOfRange(range) * Number(bodyNodes));
      return range;
    },
  };
}

/**
 * `+` on lists makes a flat list: the library's lazy concatenation nests one level per `+`, so a
 * list built by `map` or `filter` item by item would cost its length again at each read, unseen.
 */
const flatListConcat = celFunc('_+_', [listType(CelScalar.DYN), listType(CelScalar.DYN)], listType(CelScalar.DYN), (left, right) => [...left, ...right]);

/**
 * An environment whose functions (CEL's standard ones and `funcs`) are charged to `meter`. The
 * planner reaches functions only through `funcs.find`, so the environment and its resolver are
 * derived objects (they keep the library's brands) with `find` metered.
 */
export function meteredEnv(funcs: CelFunc[], meter: CostMeter): CelEnv {
  const env = celEnv({ funcs: [...funcs, flatListConcat] });
  const iterations = iterationsGroup(meter);
  const find = (name: string): FuncGroup | undefined => {
    if (name === ITERATIONS) return iterations;
    const group = env.funcs.find(name);
    return group && meteredGroup(group, meter);
  };
  const resolver = Object.create(env.funcs, { find: { value: find } }) as FuncResolver;
  return Object.create(env, { funcs: { value: resolver } }) as CelEnv;
}

/** What the walk of an expression learns: the nodes evaluated once, how deep comprehensions nest. */
export interface MeteredShape {
  onceNodes: number;
  nesting: number;
}

/**
 * Wraps each comprehension's range in the call that charges its turns, and counts the nodes:
 * those evaluated once per evaluation, and those of each comprehension's body (condition and
 * step, without the bodies of comprehensions inside, which are charged by their own range).
 * `check` sees every node (names must be bound).
 */
export function meterComprehensions(expr: Expr, check: (expr: Expr, bound: ReadonlySet<string>) => void, variables: readonly string[]): MeteredShape {
  const shape: MeteredShape = { onceNodes: 0, nesting: 0 };
  shape.onceNodes = countNodes(expr, new Set(variables), 0, shape, check);
  return shape;
}

function countNodes(expr: Expr | undefined, bound: ReadonlySet<string>, depth: number, shape: MeteredShape, check: (expr: Expr, bound: ReadonlySet<string>) => void): number {
  if (expr === undefined) return 0;
  check(expr, bound);
  const count = (inner: Expr | undefined, names = bound, innerDepth = depth) => countNodes(inner, names, innerDepth, shape, check);
  const kind = expr.exprKind;
  switch (kind.case) {
    case 'selectExpr':
      return 1 + count(kind.value.operand);
    case 'callExpr':
      return kind.value.args.reduce((sum, arg) => sum + count(arg), 1 + count(kind.value.target));
    case 'listExpr':
      return kind.value.elements.reduce((sum, element) => sum + count(element), 1);
    case 'structExpr':
      return kind.value.entries.reduce((sum, entry) => sum + (entry.keyKind.case === 'mapKey' ? count(entry.keyKind.value) : 0) + count(entry.value), 1);
    case 'comprehensionExpr': {
      const loop = kind.value;
      shape.nesting = Math.max(shape.nesting, depth + 1);
      const inside = new Set([...bound, loop.iterVar, loop.accuVar, ...(loop.iterVar2 ? [loop.iterVar2] : [])]);
      const body = 1 + count(loop.loopCondition, inside, depth + 1) + count(loop.loopStep, inside, depth + 1);
      const once = 2 + count(loop.iterRange) + count(loop.accuInit) + count(loop.result, new Set([...bound, loop.accuVar]));
      loop.iterRange = iterationsCall(loop.iterRange, body);
      return once;
    }
    default:
      return 1;
  }
}

function iterationsCall(range: Expr | undefined, bodyNodes: number): Expr {
  return {
    $typeName: 'cel.expr.Expr',
    id: range?.id ?? 0n,
    exprKind: {
      case: 'callExpr',
      value: {
        $typeName: 'cel.expr.Expr.Call',
        function: ITERATIONS,
        args: [
          ...(range ? [range] : []),
          { $typeName: 'cel.expr.Expr', id: 0n, exprKind: { case: 'constExpr', value: { $typeName: 'cel.expr.Constant', constantKind: { case: 'int64Value', value: BigInt(bodyNodes) } } } },
        ],
      },
    },
  } as Expr;
}

/** A part of the event as CEL sees it, and the JSON value it was made from with its weight (in characters). */
export type EventParts = WeakMap<object, { json: unknown; chars: number }>;

/** The event as CEL values, and the JSON each of its maps and lists was made from. */
export interface CelEvent {
  value: unknown;
  parts: EventParts;
}

/**
 * The event made into CEL values once per event: CEL would otherwise wrap an object again at each
 * access, work as long as the object and unseen by the meter. Each map and list keeps the event's
 * JSON it came from, so a body that holds part of the event takes that JSON as it is.
 */
export function celEventOf(event: CloudEvent): CelEvent {
  const parts: EventParts = new WeakMap();
  const convert = (json: unknown): { value: unknown; chars: number } => {
    if (typeof json === 'string') return { value: json, chars: json.length + 1 };
    if (json === null || typeof json !== 'object') return { value: json, chars: 1 };
    let chars = 1;
    let value: object;
    if (Array.isArray(json)) {
      value = celList(
        // Values made here are CEL values already (celList and celMap take them as they are).
        json.map((item) => {
          const part = convert(item);
          chars += part.chars;
          return part.value;
        }) as never,
      );
    } else {
      const entries = Object.entries(json).map(([key, item]): [string, unknown] => {
        const part = convert(item);
        chars += key.length + part.chars;
        return [key, part.value];
      });
      value = celMap(new Map(entries) as never);
    }
    parts.set(value, { json, chars });
    return { value, chars };
  };
  return { value: convert(event).value, parts };
}
