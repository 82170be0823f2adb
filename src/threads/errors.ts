import { causeChain } from '../errors.js';

/**
 * An error as it crosses to another thread: what its log line shows inline (message, code, where it
 * was thrown, and its causes: a storage failure's reason is its cause, e.g. the disk being full).
 */
export interface SerializedError {
  message: string;
  name?: string;
  code?: string;
  stack?: string;
  cause?: SerializedError;
}

/** An error thrown in another thread, rebuilt here with the name, code, stack and causes it had there. */
export class CrossedError extends Error {
  readonly code?: string;

  constructor({ message, name, code, stack, cause }: SerializedError) {
    super(message, cause ? { cause: new CrossedError(cause) } : undefined);
    if (name) this.name = name;
    if (code) this.code = code;
    if (stack) this.stack = stack;
  }
}

/** An error as plain data: each link of its cause chain (bounded: a chain may loop). */
export function serializeError(error: unknown): SerializedError {
  const links = causeChain(error).map((link): SerializedError => {
    if (!(link instanceof Error)) return { message: String(link) };
    const { code } = link as { code?: unknown };
    return {
      message: link.message,
      name: link.name,
      ...(link.stack === undefined ? {} : { stack: link.stack }),
      ...(typeof code === 'string' ? { code } : {}),
    };
  });
  return links.reduceRight<SerializedError | undefined>((cause, link) => (cause ? { ...link, cause } : link), undefined) ?? { message: String(error) };
}
