/**
 * A small parser of the Prometheus text exposition format (0.0.4), strict enough that a malformed
 * line fails the test that scrapes it.
 */
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Exposition {
  /** Metric family name -> TYPE. */
  types: Map<string, string>;
  help: Map<string, string>;
  samples: Sample[];
}

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const SAMPLE = new RegExp(`^(${NAME})(?:\\{(.*)\\})? (\\S+)(?: -?\\d+)?$`);
const LABEL = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\["\\n])*)"(,|$)/;

/** As Prometheus reads values (Go's ParseFloat): NaN and Inf in any case, e.g. prom-client's `Nan`. */
function parseValue(text: string): number {
  if (/^\+?inf$/i.test(text)) return Infinity;
  if (/^-inf$/i.test(text)) return -Infinity;
  if (/^nan$/i.test(text)) return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`bad sample value ${text}`);
  return Number(text);
}

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let rest = text;
  while (rest !== '') {
    const match = LABEL.exec(rest);
    if (!match) throw new Error(`bad labels {${text}}`);
    const [whole, key, raw] = match as unknown as [string, string, string];
    if (key in labels) throw new Error(`repeated label ${key}`);
    labels[key] = raw.replace(/\\(["\\n])/g, (_m, c: string) => (c === 'n' ? '\n' : c));
    rest = rest.slice(whole.length);
  }
  return labels;
}

export function parseExposition(text: string): Exposition {
  const exposition: Exposition = { types: new Map(), help: new Map(), samples: [] };
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line);
    if (meta) {
      const [, kind, name, rest] = meta as unknown as [string, string, string, string];
      if (kind === 'TYPE') {
        if (!['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(rest)) throw new Error(`bad TYPE ${line}`);
        if (exposition.types.has(name)) throw new Error(`TYPE repeated for ${name}`);
        exposition.types.set(name, rest);
      } else exposition.help.set(name, rest);
      continue;
    }
    if (line.startsWith('#')) continue;
    const match = SAMPLE.exec(line);
    if (!match) throw new Error(`bad sample line: ${line}`);
    const [, name, labels, value] = match as unknown as [string, string, string | undefined, string];
    exposition.samples.push({ name, labels: labels ? parseLabels(labels) : {}, value: parseValue(value) });
  }
  return exposition;
}

/** The value of the one sample with exactly these labels, or undefined when absent. */
export function valueOf(exposition: Exposition, name: string, labels: Record<string, string> = {}): number | undefined {
  const wanted = Object.entries(labels);
  const found = exposition.samples.filter(
    (s) => s.name === name && Object.keys(s.labels).length === wanted.length && wanted.every(([k, v]) => s.labels[k] === v),
  );
  if (found.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} appears ${found.length} times`);
  return found[0]?.value;
}

/** Every sample of a metric, as label-set -> value. */
export function seriesOf(exposition: Exposition, name: string): Sample[] {
  return exposition.samples.filter((s) => s.name === name);
}
