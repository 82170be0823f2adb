import { Connection } from 'rabbitmq-client';

/**
 * A bare RabbitMQ publisher, no relay: persistent messages of the relay's size and properties,
 * confirmed, to a durable queue of its own, at `rate` a second until SIGTERM. What the broker alone
 * costs the machine beside a relay (bench/buses.ts).
 */
const [url, rateText] = process.argv.slice(2) as [string, string];
const rate = Number(rateText);
const rabbit = new Connection(url);
const name = `bench-publisher-${process.pid}`;
await rabbit.exchangeDeclare({ exchange: name, type: 'topic', durable: true });
await rabbit.queueDeclare({ queue: name, durable: true });
await rabbit.queueBind({ queue: name, exchange: name, routingKey: '#' });
const publisher = rabbit.createPublisher({ confirm: true, maxAttempts: 1 });
const body = Buffer.alloc(1000, 'x');
const startedAt = performance.now();
let sent = 0;
let stopping = false;
const pacer = setInterval(() => {
  const due = Math.floor(((performance.now() - startedAt) / 1000) * rate);
  for (; sent < due; sent++) {
    const envelope = { exchange: name, routingKey: `box.b${sent % 100}.ready`, durable: true, messageId: `evt_${sent}`, type: 'box.ready', contentType: 'application/cloudevents+json' };
    publisher.send(envelope, body).catch((error: unknown) => {
      // Those in flight when SIGTERM closed the channel are not the broker's failure.
      if (!stopping) console.error(`bench: amqp publisher: ${String(error)}`);
    });
  }
}, 5);
process.once('SIGTERM', () => {
  clearInterval(pacer);
  stopping = true;
  void publisher
    .close()
    .then(() => rabbit.queueDelete({ queue: name }))
    .then(() => rabbit.exchangeDelete({ exchange: name }))
    .then(() => rabbit.close())
    .finally(() => process.exit(0));
});
console.log('publishing');
