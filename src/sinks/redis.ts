import { Redis } from 'ioredis';
import pTimeout from 'p-timeout';
import type { Config } from '../config/schema.js';
import { receiverId } from '../events/cloudevent.js';
import { oncePerReason, untrusted } from '../log.js';
import { busSink, type BusDefinition, type BusSinkOptions, DEFAULT_ACK_TIMEOUT_MS, DEFAULT_BACKOFF } from './bus.js';
import { BusRefusedError, BusUnavailableError, asSinkFailure, type SinkFailure } from './failures.js';

export const REDIS_SINK = 'redis';

type RedisSettings = Pick<Config, 'redisStream' | 'redisMaxlen' | 'redisDuplicateWindow' | 'redisOrdering'>;

/**
 * The duplicate check and the add as one step on the server (contract section 12): a key per event
 * id, set only if absent with the window as its TTL, then XADD. Scripts are not rolled back, so an
 * XADD that fails takes the key away again: a retry must not be taken for a duplicate.
 * KEYS: stream, seen-key. ARGV: window ms, maxlen (0: no trimming), then the fields.
 */
const ADD_ONCE = `
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local ok, added
if ARGV[2] == '0' then
  ok, added = pcall(redis.call, 'XADD', KEYS[1], '*', unpack(fields))
else
  ok, added = pcall(redis.call, 'XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(fields))
end
if not ok then redis.call('DEL', KEYS[2]) end
return added
`;

/** Replies no attempt can change: no rights (ACL), the stream key holds another type, a value over the server's limits. */
const REFUSED = /^(NOPERM|WRONGTYPE)|exceeds maximum|too large/i;

interface AddOnce {
  addOnce(stream: string, seenKey: string, windowMs: number, maxlen: number, ...fields: string[]): Promise<string | null>;
}

interface RedisEntry {
  seenKey: string;
  fields: string[];
}

/** The Redis Streams sink: one entry per event id within the duplicate window, done when Redis answered. */
export function createRedisSink({ settings, url, logger, ackTimeoutMs = DEFAULT_ACK_TIMEOUT_MS, backoff = DEFAULT_BACKOFF }: BusSinkOptions<RedisSettings>) {
  const log = logger.child({ sink: REDIS_SINK });
  let client: (Redis & AddOnce) | undefined;
  return busSink<RedisEntry>({
    name: REDIS_SINK,
    ordering: settings.redisOrdering,
    // Replies come back in order on one connection: many in flight cost nothing.
    concurrency: 256,
    ackTimeoutMs,
    spanName: () => `publish ${settings.redisStream}`,
    message: (event, body, traceparent) => ({
      seenKey: `${settings.redisStream}:seen:${receiverId(event)}`,
      fields: ['id', event.id, 'type', event.type, 'subject', event.subject ?? '', 'event', body, ...(traceparent ? ['traceparent', traceparent] : [])],
    }),
    connect(link) {
      const report = oncePerReason((error: Error) => log.warn({ err: error }, 'Redis unreachable; deliveries wait in the outbox'), (error) => error.message);
      let failures = 0;
      const redis = new Redis(url, {
        lazyConnect: true,
        // Fail at once while disconnected (the outbox holds the work) instead of queueing in memory.
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        connectTimeout: ackTimeoutMs,
        retryStrategy: () => Math.min(backoff.maxMs, backoff.minMs * 2 ** failures++),
        connectionName: 'boxrelay',
        // The scripts of one turn go in one write (and one read of the replies), not one each.
        enableAutoPipelining: true,
      }) as Redis & AddOnce;
      redis.defineCommand('addOnce', { numberOfKeys: 2, lua: ADD_ONCE });
      redis.on('ready', () => {
        failures = 0;
        log.info('Redis connected');
        link.up();
      });
      redis.on('close', () => link.down());
      redis.on('error', report);
      client = redis;
      redis.connect().catch(() => {
        // Reported by the `error` event; the retry strategy keeps connecting.
      });
    },
    async publish({ seenKey, fields }) {
      if (!client) throw new BusUnavailableError(REDIS_SINK, 'down', 'not connected to Redis');
      // null: a re-send within the window, already in the stream.
      await client.addOnce(settings.redisStream, seenKey, settings.redisDuplicateWindow, settings.redisMaxlen, ...fields);
    },
    classify: (error) => classifyRedis(error),
    async close() {
      const redis = client;
      client = undefined;
      if (!redis) return;
      if (redis.status !== 'ready') return redis.disconnect();
      await pTimeout(redis.quit(), { milliseconds: ackTimeoutMs, message: false }).catch(() => {});
      redis.disconnect();
    },
  });
}

/** A reply error is refused for good or not by its prefix; anything else (connection, stream closed) is retried. */
function classifyRedis(error: unknown): SinkFailure {
  if (!(error instanceof Error)) return asSinkFailure(error);
  const message = untrusted(error.message, 200);
  if (error.name === 'ReplyError' && REFUSED.test(message)) return new BusRefusedError(REDIS_SINK, 'refused', message);
  return new BusUnavailableError(REDIS_SINK, 'unavailable', message);
}

export const redisBus: BusDefinition = {
  name: REDIS_SINK,
  url: (config) => config.redisUrl,
  create: ({ config, url, logger, tuning }) => createRedisSink({ settings: config, url, logger, ...tuning }),
};
