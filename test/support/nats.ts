import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { createServer, connect as connectTcp } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';

/** The shared test server (JetStream on). A missing server fails the tests that need it. */
export const SHARED_NATS = process.env.BOXRELAY_TEST_NATS_URL ?? 'nats://127.0.0.1:4222';

/** A subject prefix and stream name no other test (or agent) uses. */
export function uniqueNames(): { prefix: string; stream: string } {
  const id = randomBytes(5).toString('hex');
  return { prefix: `t${id}`, stream: `T_${id.toUpperCase()}` };
}

export interface Collector {
  messages: Msg[];
  received(count: number): Promise<Msg[]>;
}

/** A core subscription that keeps every message and lets a test await a count. */
export function collect(nc: NatsConnection, subject: string): Collector {
  const messages: Msg[] = [];
  const waiters: { count: number; resolve(messages: Msg[]): void }[] = [];
  nc.subscribe(subject, {
    callback: (_error, msg) => {
      messages.push(msg);
      for (const w of waiters.filter((w) => messages.length >= w.count)) w.resolve(messages);
    },
  });
  return {
    messages,
    received: (count) =>
      messages.length >= count ? Promise.resolve(messages) : new Promise((resolve) => waiters.push({ count, resolve })),
  };
}

/** A client for assertions; `streams` are deleted at `close()`. */
export async function natsClient(url = SHARED_NATS): Promise<{ nc: NatsConnection; jsm: JetStreamManager; streams: string[]; close(): Promise<void> }> {
  const nc = await connect({ servers: url });
  const jsm = await jetstreamManager(nc);
  const streams: string[] = [];
  return {
    nc,
    jsm,
    streams,
    async close() {
      for (const name of streams) await jsm.streams.delete(name).catch(() => false);
      await nc.close();
    },
  };
}

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function accepting(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connectTcp(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

export interface OwnNats {
  url: string;
  /** SIGKILL: the clients see the connection drop. */
  kill(): Promise<void>;
  /** Again on the same port and storage directory. */
  start(): Promise<void>;
}

/** A nats-server of the test's own (free port, own storage, `extra` flags such as auth), for tests that kill and restart it. */
export async function ownNats(extra: string[] = []): Promise<OwnNats> {
  const port = await freePort();
  const storage = mkdtempSync(join(tmpdir(), 'boxrelay-nats-'));
  let child: ChildProcess | undefined;
  const own: OwnNats = {
    url: `nats://127.0.0.1:${port}`,
    async start() {
      child = spawn('/usr/sbin/nats-server', ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storage, ...extra], { stdio: 'ignore' });
      const deadline = Date.now() + 10_000;
      while (!(await accepting(port))) {
        if (Date.now() > deadline) throw new Error('nats-server did not start');
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    },
    async kill() {
      const exiting = child && new Promise((resolve) => child!.once('exit', resolve));
      child?.kill('SIGKILL');
      await exiting;
      child = undefined;
    },
  };
  await own.start();
  return own;
}
