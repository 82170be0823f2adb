import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';

/**
 * Counts what the relay publishes under `<prefix>.>`, in its own process so the counting does not
 * slow the load generator. Talks to the harness over IPC (see bench/fanout.ts for the protocol).
 */
const [url, prefix] = process.argv.slice(2) as [string, string];
const nc = await connect({ servers: url, name: 'boxrelay-bench-counter' });
let count = 0;
let lastNs = 0n;
let waiting: { expected: number; deadline: NodeJS.Timeout } | undefined;

const settle = (): void => {
  if (waiting && count >= waiting.expected) {
    clearTimeout(waiting.deadline);
    waiting = undefined;
    process.send?.({ type: 'reached', count, atNs: String(lastNs) });
  }
};

nc.subscribe(`${prefix}.>`, {
  callback: (error) => {
    if (error) return;
    count++;
    lastNs = process.hrtime.bigint();
    settle();
  },
});
await nc.flush();

type Command = { type: 'count' } | { type: 'expect'; count: number; timeoutMs: number } | { type: 'stop'; stream?: string };

process.on('message', async (command: Command) => {
  if (command.type === 'count') process.send?.({ type: 'count', count });
  if (command.type === 'expect') {
    waiting = {
      expected: command.count,
      deadline: setTimeout(() => {
        waiting = undefined;
        process.send?.({ type: 'timeout', count, atNs: String(lastNs) });
      }, command.timeoutMs),
    };
    settle();
  }
  if (command.type === 'stop') {
    // The relay created this run's stream on the shared server; leave nothing behind.
    if (command.stream) await (await jetstreamManager(nc)).streams.delete(command.stream).catch(() => false);
    await nc.drain();
    process.exit(0);
  }
});
process.send?.({ type: 'ready' });
