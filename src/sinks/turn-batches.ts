import pTimeout from 'p-timeout';

/** A message waiting for the request of its turn, and its publish's outcome. */
export interface Waiting<M> {
  message: M;
  resolve(): void;
  reject(error: unknown): void;
}

export interface TurnBatchOptions<M> {
  /** One request for a batch; it settles each message's publish. */
  send(batch: Waiting<M>[]): Promise<void>;
  bytesOf(message: M): number;
  /** A batch is sent before it would grow past this many bytes. */
  maxBytes: number;
  /** A batch is sent once it holds this many messages (the service's per-request limit). */
  maxMessages?: number;
}

/**
 * The messages published in one event-loop turn go in one request (a client's cost is mostly per
 * request, not per message), split by the service's limits.
 */
export function turnBatches<M>({ send, bytesOf, maxBytes, maxMessages = Infinity }: TurnBatchOptions<M>) {
  const inFlight = new Set<Promise<unknown>>();
  let waiting: Waiting<M>[] = [];
  let waitingBytes = 0;
  const flush = (): void => {
    const batch = waiting;
    waiting = [];
    waitingBytes = 0;
    if (batch.length === 0) return;
    const sent = send(batch);
    inFlight.add(sent);
    void sent.finally(() => inFlight.delete(sent));
  };
  return {
    /** Resolves (or rejects) as the request carrying the message settles it. */
    publish(message: M): Promise<void> {
      return new Promise<void>((resolve, reject) => {
        const bytes = bytesOf(message);
        if (waitingBytes + bytes > maxBytes) flush();
        waitingBytes += bytes;
        if (waiting.push({ message, resolve, reject }) === 1) setImmediate(flush);
        if (waiting.length >= maxMessages) flush();
      });
    },
    /** Waits (at most `ms`) for the requests in flight. */
    async drain(ms: number): Promise<void> {
      await pTimeout(Promise.allSettled(inFlight), { milliseconds: ms, message: false }).catch(() => {});
    },
  };
}
