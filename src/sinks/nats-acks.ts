import { JetStreamApiCodes } from '@nats-io/jetstream';
import { createInbox, type MsgHdrsImpl, type Msg, type NatsConnection } from '@nats-io/transport-node';

/** The server's answer to a JetStream publish: a stream stored it (or had it, a duplicate), or an API error. */
interface PubAck {
  stream?: string;
  error?: { code?: number; err_code?: number; description?: string };
}

/** No stream captures the subject: nobody answered (503, no responders), or the server named the stream missing. */
export class NoStreamCaptures extends Error {}

/** The server answered, but not with an ack. */
export class NotAcked extends Error {}

interface Awaiting {
  subject: string;
  resolve(): void;
  reject(error: unknown): void;
}

export interface AckInbox {
  /**
   * Publishes with a reply subject of this inbox; resolves with the stream's ack, rejects with
   * NoStreamCaptures, NotAcked, or `noAck(timeoutMs)` once the publishes of its turn have waited that long.
   */
  publish(subject: string, payload: string, headers: MsgHdrsImpl): Promise<void>;
  /** The server refused publishing on `subject` (permissions): its publishes awaiting acks end with `error`. */
  refuse(subject: string, error: Error): void;
}

/**
 * JetStream publishes whose acks come back to one subscription of the connection: each is a plain
 * publish with a reply subject under this inbox, and the publishes of one event-loop turn wait for
 * their acks under one timer. nats.js's `js.publish` makes a request of each (its own timer, and an
 * error object built when the request ends, answered or not): twice the CPU per event. The
 * subscription lives as long as the connection (nats.js subscribes again after a reconnect); acks of
 * publishes sent before a disconnect may never come, and their turn's timer ends them.
 */
export function createAckInbox(connection: NatsConnection, { timeoutMs, noAck }: { timeoutMs: number; noAck: (timeoutMs: number) => Error }): AckInbox {
  const prefix = createInbox();
  const awaiting = new Map<string, Awaiting>();
  let next = 0;
  /** Tokens of this turn's publishes, ended together by one timer. */
  let turn: string[] | undefined;

  const end = (token: string, outcome: (waiter: Awaiting) => void) => {
    const waiter = awaiting.get(token);
    if (!waiter) return;
    awaiting.delete(token);
    outcome(waiter);
  };

  const answered = (error: Error | null, msg: Msg) => {
    // The subscription was refused (permissions): no ack can come; every publish awaiting one ends.
    if (error) return void [...awaiting.keys()].forEach((token) => end(token, (waiter) => waiter.reject(error)));
    end(msg.subject.slice(prefix.length + 1), (waiter) => {
      if (msg.headers?.hasError) {
        const status = msg.headers.code;
        return waiter.reject(status === 503 ? new NoStreamCaptures('no responders') : new NotAcked(`${status} ${msg.headers.description}`));
      }
      let ack: PubAck;
      try {
        ack = msg.json<PubAck>();
      } catch {
        return waiter.reject(new NotAcked('an answer that is no JetStream ack'));
      }
      if (ack.error) {
        const reason = ack.error.description ?? `JetStream error ${ack.error.err_code ?? ack.error.code}`;
        return waiter.reject(ack.error.err_code === JetStreamApiCodes.StreamNotFound ? new NoStreamCaptures(reason) : new NotAcked(reason));
      }
      if (!ack.stream) return waiter.reject(new NotAcked('invalid ack response'));
      waiter.resolve();
    });
  };
  connection.subscribe(`${prefix}.*`, { callback: answered });

  const endTurn = (tokens: string[]) => () => {
    for (const token of tokens) end(token, (waiter) => waiter.reject(noAck(timeoutMs)));
  };

  return {
    publish(subject, payload, headers) {
      const token = (next++).toString(36);
      const acked = new Promise<void>((resolve, reject) => awaiting.set(token, { subject, resolve, reject }));
      try {
        connection.publish(subject, payload, { headers, reply: `${prefix}.${token}` });
      } catch (error) {
        awaiting.delete(token);
        throw error;
      }
      if (!turn) {
        const tokens: string[] = (turn = []);
        setTimeout(endTurn(tokens), timeoutMs).unref();
        setImmediate(() => (turn = undefined));
      }
      turn.push(token);
      return acked;
    },
    refuse(subject, error) {
      for (const [token, waiter] of awaiting) if (waiter.subject === subject) end(token, () => waiter.reject(error));
    },
  };
}
