import type { ArchiveLedger } from '../store/archive/ledger.js';
import type { Clock } from '../clock.js';
import type { Config } from '../config/schema.js';
import type { DependencyStatus } from '../dependency-status.js';
import type { Logger } from '../log.js';
import type { Bus, BusTuning } from '../sinks/bus.js';
import { configuredBuses } from '../sinks/buses.js';
import { createHttpHookSink } from '../sinks/http-hook.js';
import type { Sink } from '../sinks/sink.js';
import { createDispatcher, type DispatcherDeps, type WakeScope } from './dispatcher.js';

/**
 * The fan-out as the rest of the relay sees it, wherever it runs: on the receiver's event loop
 * (`inline`) or in a worker thread.
 */
export interface Fanout {
  /** Names, up state and attempts waiting for their turn, for the `sink_up` gauge and `GET /admin/sinks`. */
  readonly sinks: Pick<Sink, 'name' | 'up' | 'throttled'>[];
  /** Each configured bus's `/readyz` check, by bus name. */
  dependencies(): Record<string, DependencyStatus>;
  start(): Promise<void>;
  /** After a commit of new deliveries (`log`), or a dead letter retry, a replay or a resume (`all`, the default). */
  wake(scope?: WakeScope): void;
  /**
   * A sink was paused or resumed: resolves once this process's dispatcher has taken it (a worker
   * thread confirms it), so that no attempt starts after that with the state before. A worker whose
   * event loop is stuck confirms late; the pause fence bounds the wait (see pauses.ts).
   */
  sinkStateChanged(sink: string): Promise<void>;
  /** Resolves once the wakes asked so far have been served and no attempt is under way (see Dispatcher.whenIdle). */
  whenIdle(): Promise<void>;
  /** The dispatcher finishes or releases its rows within `graceMs`; then the sinks close (buses drain). */
  stop(graceMs: number): Promise<void>;
}

export interface SinksDeps {
  config: Config;
  clock: Clock;
  logger: Logger;
  buses?: BusTuning | undefined;
  /** A hook's transform failed on an event (counted and logged where the metrics are). */
  onTransformError?: ((sink: string, error: Error) => void) | undefined;
  /** The S3 archive's ledger (the fan-out's storage). */
  archive: ArchiveLedger;
}

/** The configured sinks: the buses whose URL is set, then the hooks. */
export function createSinks({ config, clock, logger, buses: tuning, onTransformError, archive }: SinksDeps): { sinks: Sink[]; buses: Bus[] } {
  const buses = configuredBuses(config).map(({ bus, url }) => bus.create({ config, url, logger, clock, tuning, archive }));
  const hooks = config.hooks.map((hook) => createHttpHookSink({ hook, clock, proxyEnv: config.proxyEnv, onTransformError }));
  return { buses, sinks: [...buses, ...hooks] };
}

/** Each bus's check, by its name. */
export function busChecks(buses: Bus[]): Record<string, DependencyStatus> {
  return Object.fromEntries(buses.map((bus) => [bus.name, bus.check()]));
}

/** The dispatcher and its sinks in this thread. */
export function createInlineFanout(deps: DispatcherDeps & { buses: Bus[] }): Fanout {
  const { buses, sinks } = deps;
  const dispatcher = createDispatcher(deps);
  return {
    sinks,
    dependencies: () => busChecks(buses),
    async start() {
      for (const bus of buses) bus.start();
      await dispatcher.start();
    },
    wake: dispatcher.wake,
    sinkStateChanged: async (sink) => dispatcher.sinkStateChanged(sink),
    whenIdle: dispatcher.whenIdle,
    async stop(graceMs) {
      await dispatcher.stop(graceMs);
      await Promise.all(sinks.map((sink) => sink.close()));
    },
  };
}
