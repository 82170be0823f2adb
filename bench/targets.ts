import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { BENCH_SECRET } from './deliveries.js';
import { FanoutCounter } from './fanout.js';
import { freePort, spawnServer, type Spawned } from './processes.js';

export interface Running {
  server: Spawned;
  /** Present when the relay was started with NATS configured. */
  fanout?: { counter: FanoutCounter; stream: string };
  stop(): Promise<void>;
}

export interface Target {
  key: string;
  label: string;
  start(): Promise<Running>;
}

export interface Context {
  root: string;
  tmp: string;
  /** Undefined when no NATS server answers. */
  natsUrl: string | undefined;
  profileDir: string | undefined;
}

/** A baseline server: compiled bench/targets/<name>.js in its own process. */
export function baseline(key: string, label: string, script: string, ctx: Context): Target {
  return {
    key,
    label,
    async start() {
      const port = await freePort();
      const args = [...profileFlags(ctx, key), join(ctx.root, 'dist/bench/targets', script)];
      const server = await spawnServer({ args, env: { PORT: String(port) }, port, cwd: ctx.root });
      return { server, stop: () => server.stop() };
    },
  };
}

let runs = 0;

/**
 * `node --cpu-prof` flags when profiles are asked for: a directory per run of a target, holding a
 * file per thread (Node's default names carry the thread id; one name for all would keep only the
 * last thread to exit, and the fan-out runs in a worker).
 */
function profileFlags(ctx: Context, key: string): string[] {
  if (!ctx.profileDir) return [];
  return ['--cpu-prof', `--cpu-prof-dir=${join(ctx.profileDir, `${key}-${++runs}_${randomBytes(4).toString('hex')}`)}`];
}

/** The Node flags the image's ENTRYPOINT and `npm start` give the relay (test/node-engines.test.ts holds the three alike). */
export const RELAY_NODE_FLAGS = ['--max-semi-space-size=4'];

/** The relay exactly as users run it: `node bin/boxrelay.js serve` with env configuration. */
export function relay(
  key: string,
  label: string,
  ctx: Context,
  options: {
    logLevel: string;
    database: () => string;
    checkout?: string;
    fanout?: boolean;
    env?: Record<string, string>;
    /** The receiving port, when the load must be aimed at it before the relay listens. */
    port?: number;
    startTimeoutMs?: number;
  },
): Target {
  return {
    key,
    label,
    async start() {
      const [port, internalPort] = [options.port ?? (await freePort()), await freePort()];
      const tag = `${++runs}_${randomBytes(4).toString('hex')}`;
      const env: Record<string, string> = {
        BOXRELAY_SECRETS: BENCH_SECRET,
        PORT: String(port),
        HOST: '127.0.0.1',
        BOXRELAY_INTERNAL_PORT: String(internalPort),
        BOXRELAY_INTERNAL_HOST: '127.0.0.1',
        BOXRELAY_DATABASE: options.database(),
        LOG_LEVEL: options.logLevel,
        ...options.env,
      };
      let fanout: Running['fanout'];
      if (ctx.natsUrl && options.fanout !== false) {
        // A prefix and stream of its own on the shared server; the counter subscribes before the relay starts.
        const prefix = `bench_${tag}`;
        const stream = `BENCH_${tag}`.toUpperCase();
        Object.assign(env, { BOXRELAY_NATS_URL: ctx.natsUrl, BOXRELAY_NATS_SUBJECT_PREFIX: prefix, BOXRELAY_NATS_STREAM: stream });
        fanout = { counter: await FanoutCounter.start(ctx.natsUrl, prefix), stream };
      }
      const server = await spawnServer({ args: [...profileFlags(ctx, key), ...RELAY_NODE_FLAGS, join(options.checkout ?? ctx.root, 'bin/boxrelay.js'), 'serve'], env, port, cwd: ctx.root, startTimeoutMs: options.startTimeoutMs });
      return {
        server,
        ...(fanout ? { fanout } : {}),
        async stop() {
          await server.stop();
          await fanout?.counter.stop(fanout.stream);
        },
      };
    },
  };
}
