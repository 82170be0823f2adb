import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { hooksSchema } from '../src/config/schema.js';
import type { CloudEvent } from '../src/events/cloudevent.js';
import { BUILTIN_TRANSFORMS } from '../src/sinks/builtin-formats.js';
import { compileFilter } from '../src/sinks/filter.js';
import { hookTransformOf } from '../src/sinks/transform.js';

/** The Transforms section of docs/hooks.md: what users copy must do what the page says. */
const page = readFileSync(new URL('../docs/hooks.md', import.meta.url), 'utf8');
const section = page.slice(page.indexOf('\n## Transforms\n'));

interface Block {
  lang: string;
  role: string;
  text: string;
}
const blocks: Block[] = [...section.matchAll(/```(\w+)(?: (\w+))?\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1]!, role: m[2] ?? '', text: m[3]! }));

describe('docs/hooks.md, Transforms', () => {
  it('shows each built-in format\'s source as the relay ships it', () => {
    const shown = blocks.filter((b) => b.lang === 'cel').map((b) => b.text.trimEnd());
    expect(shown).toEqual(Object.values(BUILTIN_TRANSFORMS));
  });

  it('every configuration example loads, and each worked example gives the output shown for the sample event', () => {
    const sample = JSON.parse(blocks.find((b) => b.role === 'sample')!.text) as CloudEvent;
    const size = JSON.stringify(sample).length;
    let compared = 0;
    blocks.forEach((block, index) => {
      if (block.lang !== 'yaml') return;
      const hooks = hooksSchema.parse(parse(block.text));
      for (const hook of hooks) {
        if (hook.filter !== undefined) expect(compileFilter(hook.filter).matches(sample)).toBe(true);
        const transform = hookTransformOf(hook);
        if (transform === undefined || hook.transform === undefined) continue;
        const made = transform.bodyOf(sample, size);
        const output = blocks[index + 1];
        if (output?.role !== 'output') continue;
        compared++;
        if (output.lang === 'json') expect([JSON.parse(made!.body), made!.contentType]).toEqual([JSON.parse(output.text), 'application/json']);
        else expect([made!.body, made!.contentType]).toEqual([output.text.trimEnd(), 'text/plain; charset=utf-8']);
      }
    });
    // PagerDuty, Opsgenie, a Teams card, an internal API, a filter with a transform.
    expect(compared).toBe(5);
  });
});
