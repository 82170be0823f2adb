// docs/troubleshooting.md names every failure code the code can produce: the codes are read from the
// sources (the error classes, the sinks' failures and the buses' refusals), not listed here by hand.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');
const page = readFileSync(join(ROOT, 'docs', 'troubleshooting.md'), 'utf8');
const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sources(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [],
  );
}

const literals = (text: string) => [...text.matchAll(/'([^'\n]+)'/g)].map(([, value]) => value!);

/** The members of each `…Code` union in src/errors.ts that are plain strings (the templates are read below). */
function errorCodeUnions(): string[] {
  return [...read('src/errors.ts').matchAll(/export type \w+Code =([^;]+);/g)].flatMap(([, union]) => literals(union!));
}

/** `readonly code = '…'` of every error class, and `super('…'` of the sinks' failures. */
function classCodes(): string[] {
  return sources('src').flatMap((file) => {
    const text = read(file);
    const own = [...text.matchAll(/readonly code = '([a-z0-9_]+)'/g)].map(([, code]) => code!);
    const failures = file.startsWith(join('src', 'sinks')) ? [...text.matchAll(/super\('([a-z0-9_]+)'/g)].map(([, code]) => code!) : [];
    return [...own, ...failures];
  });
}

/** Every bus by its sink name (the BusName union). */
const buses = literals(/export type BusName =([^;]+);/.exec(read('src/errors.ts'))![1]!);

/** The sink name each sink file declares (`export const NATS_SINK = 'nats'`). */
function sinkNameOf(text: string): Record<string, string> {
  return Object.fromEntries([...text.matchAll(/export const (\w+_SINK) = '([a-z0-9]+)'/g)].map(([, constant, name]) => [constant!, name!]));
}

/**
 * The buses' codes `<bus>_<reason>`: each literal reason a sink file gives BusUnavailableError or
 * BusRefusedError, and the broker's refusals it lists (kafka's and RabbitMQ's sets, lower-cased). A
 * reason given for a sink passed in (aws.ts) is each AWS sink's: the files that import aws.ts.
 */
function busCodes(): string[] {
  const sinkFiles = sources(join('src', 'sinks'));
  const constants = Object.assign({}, ...sinkFiles.map((file) => sinkNameOf(read(file)))) as Record<string, string>;
  const awsSinks = sinkFiles.filter((file) => read(file).includes("from './aws.js'")).flatMap((file) => Object.values(sinkNameOf(read(file))));
  return sinkFiles.flatMap((file) => {
    const text = read(file);
    const codes: string[] = [];
    // The reason: a literal, or a choice of literals (`status === undefined ? 'unreachable' : 'unavailable'`).
    for (const [, target, reasons] of text.matchAll(/new Bus(?:Unavailable|Refused)Error\((\w+), ([^,()]+),/g)) {
      const named = constants[target!];
      for (const reason of literals(reasons!)) for (const bus of named ? [named] : awsSinks) codes.push(`${bus}_${reason}`);
    }
    const refusedByName = /new BusRefusedError\((\w+_SINK), [\w.]+\.toLowerCase\(\)/.exec(text);
    if (refusedByName) {
      const refusals = [...text.matchAll(/new Set\(\[([^\]]+)\]\)/g)].flatMap(([, items]) => literals(items!)).filter((item) => /^[A-Z_]+$/.test(item));
      for (const refusal of refusals) codes.push(`${constants[refusedByName[1]!]}_${refusal.toLowerCase()}`);
    }
    return codes;
  });
}

const named = (code: string) => page.includes(`\`${code}\``);

describe('docs/troubleshooting.md', () => {
  it('names every error code of the error classes and of the …Code unions', () => {
    const codes = [...new Set([...errorCodeUnions(), ...classCodes()])];
    expect(codes.length).toBeGreaterThan(60);
    expect(codes.filter((code) => !named(code))).toEqual([]);
  });

  it('names each bus’s failure codes, the templates and the hooks’ HTTP codes', () => {
    const codes = [...buses.flatMap((bus) => [`${bus}_down`]), ...busCodes()];
    expect(codes).toEqual(expect.arrayContaining(['kafka_topic_authorization_failed', 'amqp_access_refused', 'sqs_unreachable', 's3_unavailable', 'mqtt_refused']));
    expect(codes.filter((code) => !named(code))).toEqual([]);
    // Codes made from a value: the page gives their form.
    const failures = read('src/sinks/failures.ts');
    if (failures.includes('super(`http_${')) expect(named('http_<status>')).toBe(true);
    if (failures.includes('super(`${bus}_timeout`')) expect(named('<bus>_timeout')).toBe(true);
    // An AWS service's refusal is its error name in snake case (codeOf in aws.ts), for each AWS sink.
    const awsSinks = sources(join('src', 'sinks')).filter((file) => read(file).includes("from './aws.js'")).flatMap((file) => Object.values(sinkNameOf(read(file))));
    expect(awsSinks.sort()).toEqual(['s3', 'sns', 'sqs']);
    for (const bus of awsSinks) expect(named(`${bus}_<error>`), bus).toBe(true);
  });

  it('names what last_error holds for work set aside for a sink no replica serves', () => {
    const [, setAside] = /SINK_NOT_CONFIGURED = '([^']+)'/.exec(read('src/store/exceptions/rows.ts'))!;
    expect(named(setAside!)).toBe(true);
  });
});

/**
 * The warn, error and fatal lines the relay logs: each call `<logger>.warn|error|fatal(…)` (or at a
 * level chosen as it runs, `<logger>[level](…)`) in src/,
 * by its message's text (a template's or a concatenation's longest literal part). Messages given
 * as a variable (a reason passed in) are not read.
 */
function logMessages(): { where: string; text: string }[] {
  const messages: { where: string; text: string }[] = [];
  for (const file of sources('src')) {
    const source = ts.createSourceFile(file, read(file), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && isWarnOrWorse(node.expression)) {
        const target = node.expression.expression.getText(source);
        const message = node.arguments.at(-1);
        if (/(^|\.)\w*[lL]og(ger)?$/.test(target) && message !== undefined) {
          const parts = literalParts(message);
          const longest = parts.sort((a, b) => b.length - a.length)[0];
          const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
          if (longest !== undefined) messages.push({ where: `${file}:${line}`, text: longest });
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return messages;
}

/**
 * `logger.warn(…)`, `.error` or `.fatal`, and a level chosen as the call runs (`deliveryLog[level](…)`),
 * which may be any of them.
 */
function isWarnOrWorse(callee: ts.Expression): callee is ts.PropertyAccessExpression | ts.ElementAccessExpression {
  if (ts.isPropertyAccessExpression(callee)) return ['warn', 'error', 'fatal'].includes(callee.name.text);
  if (!ts.isElementAccessExpression(callee)) return false;
  const level = callee.argumentExpression;
  return ts.isStringLiteral(level) ? ['warn', 'error', 'fatal'].includes(level.text) : true;
}

/** The literal text of a message: a string, a template's fixed parts, a concatenation's. */
function literalParts(node: ts.Expression): string[] {
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return [node.text];
  if (ts.isTemplateExpression(node)) return [node.head.text, ...node.templateSpans.map((span) => span.literal.text)].filter((text) => text.trim().length > 0);
  if (ts.isBinaryExpression(node) && node.operatorToken.kind === ts.SyntaxKind.PlusToken) return [...literalParts(node.left), ...literalParts(node.right)];
  if (ts.isParenthesizedExpression(node)) return literalParts(node.expression);
  return [];
}

describe('docs/troubleshooting.md and the log', () => {
  it('gives every warn, error and fatal message of the relay', () => {
    const messages = logMessages();
    expect(messages.length).toBeGreaterThan(50);
    // A refused delivery's line, logged at a level chosen per outcome.
    expect(messages).toContainEqual({ where: expect.stringMatching(/receive-webhook\.ts:\d+$/), text: 'delivery' });
    expect(messages.filter(({ text }) => !page.includes(text)).map(({ where, text }) => `${where}: ${text}`)).toEqual([]);
  });
});
