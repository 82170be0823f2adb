/** The timer functions a schedule uses; tests pass their own and fire them by hand. */
export interface Timers {
  setTimeout(callback: () => Promise<void>, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const nodeTimers: Timers = {
  setTimeout: (callback, ms) => setTimeout(callback, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export interface Schedule {
  /** Cancels the next run, cuts one in progress short (its signal aborts) and waits for it. */
  stop(): Promise<void>;
}

/**
 * A background job run shortly after start, then every `intervalMs`. Runs are chained (the next is
 * planned when one ends), so they never overlap. The job reports its own failures; one that
 * escapes is handed to `onError` and the schedule goes on.
 */
export function scheduleRepeating(
  job: (signal: AbortSignal) => Promise<void>,
  options: { timers?: Timers | undefined; firstDelayMs: number; intervalMs: number; onError(error: unknown): void },
): Schedule {
  const timers = options.timers ?? nodeTimers;
  let handle: unknown;
  let running: Promise<void> | undefined;
  const stopping = new AbortController();

  const plan = (ms: number) => {
    handle = timers.setTimeout(() => {
      running = job(stopping.signal)
        .catch(options.onError)
        .finally(() => {
          running = undefined;
          if (!stopping.signal.aborted) plan(options.intervalMs);
        });
      return running;
    }, ms);
  };
  plan(options.firstDelayMs);

  return {
    async stop() {
      stopping.abort();
      timers.clearTimeout(handle);
      await running;
    },
  };
}
