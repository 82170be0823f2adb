import type { Config } from '../config/schema.js';
import { amqpBus } from './amqp.js';
import type { BusDefinition } from './bus.js';
import { kafkaBus } from './kafka.js';
import { mqttBus } from './mqtt.js';
import { natsBus } from './nats.js';
import { redisBus } from './redis.js';
import { s3Archive } from './s3-archive.js';
import { snsBus } from './sns.js';
import { sqsBus } from './sqs.js';

/** Every bus the relay can publish to, in the order their sinks are listed. A new bus is one entry. */
export const BUSES: readonly BusDefinition[] = [natsBus, amqpBus, redisBus, mqttBus, kafkaBus, sqsBus, snsBus, s3Archive];

/** The buses whose URL is set, with it. */
export function configuredBuses(config: Config): { bus: BusDefinition; url: string }[] {
  return BUSES.flatMap((bus) => {
    const url = bus.url(config);
    return url === undefined ? [] : [{ bus, url }];
  });
}

/** The sink names of the buses a configuration turns on. */
export function busNames(config: Config): string[] {
  return configuredBuses(config).map(({ bus }) => bus.name);
}
