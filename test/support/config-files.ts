import { ConfigError } from '../../src/config/load.js';

/** `readFile` over the given contents; any other path is missing (ENOENT), as on disk. */
export const files = (contents: Record<string, string>) => (path: string) => {
  const text = contents[path];
  if (text === undefined) throw Object.assign(new Error('missing'), { code: 'ENOENT' });
  return text;
};

/** The problems of the ConfigError `fn` throws; anything else fails the test. */
export const problemsOf = (fn: () => unknown): string[] => {
  try {
    fn();
  } catch (error) {
    if (error instanceof ConfigError) return error.problems;
    throw error;
  }
  throw new Error('expected a ConfigError');
};
