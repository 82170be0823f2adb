import type { Clock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import type { Logger } from '../log.js';
import { createHttpHookSink } from '../sinks/http-hook.js';
import { createNatsSink, type NatsSink, type NatsSinkOptions } from '../sinks/nats.js';
import type { Sink } from '../sinks/sink.js';
import { createDispatcher, type DispatcherDeps } from './dispatcher.js';

/**
 * The fan-out as the rest of the relay sees it, wherever it runs: on the receiver's event loop
 * (`inline`) or in a worker thread.
 */
export interface Fanout {
  /** Names, up state and attempts waiting for their turn, for the `sink_up` gauge and `GET /admin/sinks`. */
  readonly sinks: Pick<Sink, 'name' | 'up' | 'throttled'>[];
  /** The NATS sink's `/readyz` detail; undefined without NATS. */
  natsStatus(): DependencyStatus | undefined;
  start(): Promise<void>;
  /** After a commit of new work, a dead letter retry, a replay or a resume. */
  wake(): void;
  /** A sink was paused or resumed. */
  sinkStateChanged(sink: string): void;
  /** The dispatcher finishes or releases its rows within `graceMs`; then the sinks close (NATS drains). */
  stop(graceMs: number): Promise<void>;
}

export interface SinksDeps {
  config: Config;
  clock: Clock;
  logger: Logger;
  nats?: Pick<NatsSinkOptions, 'ackTimeoutMs' | 'backoff'> | undefined;
}

/** The configured sinks: NATS first (when set), then the hooks. */
export function createSinks({ config, clock, logger, nats: natsOptions }: SinksDeps): { sinks: Sink[]; nats: NatsSink | undefined } {
  const nats = config.natsUrl ? createNatsSink({ settings: { ...config, natsUrl: config.natsUrl }, logger, ...natsOptions }) : undefined;
  return { nats, sinks: [...(nats ? [nats] : []), ...config.hooks.map((hook) => createHttpHookSink({ hook, clock, proxyEnv: config.proxyEnv }))] };
}

/** The dispatcher and its sinks in this thread. */
export function createInlineFanout(deps: DispatcherDeps & { nats: NatsSink | undefined }): Fanout {
  const { nats, sinks } = deps;
  const dispatcher = createDispatcher(deps);
  return {
    sinks,
    natsStatus: () => nats?.check(),
    async start() {
      nats?.start();
      await dispatcher.start();
    },
    wake: dispatcher.wake,
    sinkStateChanged: dispatcher.sinkStateChanged,
    async stop(graceMs) {
      await dispatcher.stop(graceMs);
      await Promise.all(sinks.map((sink) => sink.close()));
    },
  };
}
