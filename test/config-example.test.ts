// examples/boxrelay.yaml, the annotated configuration file: every setting of the schema is in it, each
// commented-out value is valid and is the default (or an example where there is none), and the file
// as it stands passes `boxrelay config check`.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { parse as parseYaml } from 'yaml';
import { configKeys, configSchema, type ConfigKey } from '../src/config/schema.js';
import { requireBuild, runCli } from './support/process.js';
import { SECRET } from './support/sign.js';

const EXAMPLE = join(import.meta.dirname, '..', 'examples', 'boxrelay.yaml');
const text = readFileSync(EXAMPLE, 'utf8');

/** A setting at the top level of the file: `key: value`, or `# key: value` when commented out. */
const SETTING = /^(# )?([a-z][A-Za-z0-9]*):(?: (.*))?$/;
/** A key inside a list setting's entries (hooks, accounts), commented out or not. */
const NESTED = /^#?\s+(?:#\s+)?(?:-\s+)?([a-z][A-Za-z0-9]*):/;

interface Setting {
  key: string;
  commented: boolean;
  value: string | undefined;
  /** The comment lines right above it. */
  comment: string[];
  /** Keys inside its entries, for a list of objects. */
  nested: Set<string>;
}

function settingsOfExample(): Setting[] {
  const settings: Setting[] = [];
  let comment: string[] = [];
  let current: Setting | undefined;
  for (const line of text.split('\n')) {
    const setting = SETTING.exec(line);
    if (setting) {
      current = { key: setting[2]!, commented: setting[1] !== undefined, value: setting[3], comment, nested: new Set() };
      settings.push(current);
      comment = [];
      continue;
    }
    const nested = NESTED.exec(line);
    if (nested && current) current.nested.add(nested[1]!);
    else if (line.startsWith('# ')) {
      if (line.startsWith('# ===')) current = undefined;
      comment.push(line);
    } else if (line === '') comment = [];
  }
  return settings;
}

/** The keys of a setting that is a list of objects (the hooks, the accounts), read from its schema; none otherwise. */
function entryKeysOf(key: ConfigKey): string[] {
  let schema = configSchema.shape[key] as z.core.$ZodType;
  for (;;) {
    const def = schema._zod.def as { type: string; innerType?: z.core.$ZodType; element?: z.core.$ZodType; shape?: Record<string, z.core.$ZodType> };
    if ((def.type === 'default' || def.type === 'optional') && def.innerType) schema = def.innerType;
    else if (def.type === 'array' && def.element) schema = def.element;
    else return def.type === 'object' && def.shape ? Object.keys(def.shape) : [];
  }
}

const settings = settingsOfExample();
const defaults = configSchema.parse({}) as Record<string, unknown>;

describe('examples/boxrelay.yaml', () => {
  it('has every setting of the schema, once, and nothing else', () => {
    const keys = settings.map(({ key }) => key);
    expect(keys.filter((key) => !configKeys.includes(key as ConfigKey)), 'not settings').toEqual([]);
    expect(configKeys.filter((key) => !keys.includes(key)), 'missing from the example').toEqual([]);
    expect(keys.filter((key, index) => keys.indexOf(key) !== index), 'twice').toEqual([]);
  });

  it('has every key of a hook and of an account, in the entries of their lists', () => {
    const lists = configKeys.filter((key) => entryKeysOf(key).length > 0);
    expect(lists).toContain('hooks');
    for (const key of lists) {
      const setting = settings.find((s) => s.key === key)!;
      expect(entryKeysOf(key).filter((entryKey) => !setting.nested.has(entryKey)), `${key}: missing`).toEqual([]);
    }
  });

  it('says above each setting what it does and its default', () => {
    const undescribed = settings.filter(({ comment }) => !comment.some((line) => line.includes('Default:'))).map(({ key }) => key);
    expect(undescribed).toEqual([]);
  });

  it('shows, commented out, each setting’s default, or a valid example where it is unset by default', () => {
    const problems: string[] = [];
    for (const { key, commented, value } of settings) {
      if (!commented || value === undefined) continue;
      let given: unknown;
      try {
        given = parseYaml(`${key}: ${value}`);
      } catch (error) {
        problems.push(`${key}: ${value} is not YAML (${String(error).split('\n')[0]})`);
        continue;
      }
      const parsed = configSchema.safeParse(given);
      if (!parsed.success) {
        problems.push(`${key}: ${value} is not valid: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`);
        continue;
      }
      const fallback = defaults[key];
      const hasDefault = fallback !== undefined && !(Array.isArray(fallback) && fallback.length === 0);
      if (hasDefault && !isDeepStrictEqual((parsed.data as Record<string, unknown>)[key], fallback)) problems.push(`${key}: shows ${value}, the default is ${JSON.stringify(fallback)}`);
    }
    expect(problems).toEqual([]);
  });

  describe('boxrelay config check', () => {
    beforeAll(requireBuild);

    it('accepts the file as it stands: the settings it turns on and the defaults of the rest', async () => {
      const { code, stdout, stderr } = await runCli(['config', 'check'], { BOXRELAY_CONFIG: EXAMPLE, BOXRELAY_SECRETS: SECRET });
      expect(stderr).toBe('');
      expect(code).toBe(0);
      const effective = parseYaml(stdout) as Record<string, unknown> & { hooks: { name: string }[] };
      for (const { key, commented, value } of settings.filter((s) => !s.commented)) {
        if (value !== undefined) expect(effective[key], `${key} (commented: ${commented})`).toEqual(parseYaml(value));
      }
      expect(effective.hooks.map(({ name }) => name)).toEqual(['alerts']);
      expect(effective.port).toBe(8080);
      expect(effective.database).toBe('./data/boxrelay.db');
    });
  });
});
