import { fork, type ChildProcess } from 'node:child_process';
import { connect } from '@nats-io/transport-node';
import { fileURLToPath } from 'node:url';

type Reply = { type: 'ready' } | { type: 'count'; count: number } | { type: 'reached' | 'timeout'; count: number; atNs: string };

/** The harness side of bench/targets/nats-counter.ts. */
export class FanoutCounter {
  private constructor(private readonly child: ChildProcess) {}

  static async start(url: string, prefix: string): Promise<FanoutCounter> {
    const child = fork(fileURLToPath(new URL('./targets/nats-counter.js', import.meta.url)), [url, prefix], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const counter = new FanoutCounter(child);
    await counter.next('ready');
    return counter;
  }

  private next<T extends Reply['type']>(...types: T[]): Promise<Extract<Reply, { type: T }>> {
    return new Promise((resolve, reject) => {
      const onMessage = (reply: Reply) => {
        if (!(types as string[]).includes(reply.type)) return;
        this.child.off('message', onMessage);
        this.child.off('exit', onExit);
        resolve(reply as Extract<Reply, { type: T }>);
      };
      const onExit = (code: number | null) => reject(new Error(`the NATS counter exited (${code})`));
      this.child.on('message', onMessage);
      this.child.once('exit', onExit);
    });
  }

  async count(): Promise<number> {
    const reply = this.next('count');
    this.child.send({ type: 'count' });
    return (await reply).count;
  }

  /** Waits until `expected` messages arrived; answers when (hrtime ns) the last one did, or null on timeout. */
  async until(expected: number, timeoutMs: number): Promise<{ count: number; atNs: bigint | null }> {
    const reply = this.next('reached', 'timeout');
    this.child.send({ type: 'expect', count: expected, timeoutMs });
    const { type, count, atNs } = await reply;
    return { count, atNs: type === 'reached' ? BigInt(atNs) : null };
  }

  /** Polls until at least one message arrived or `timeoutMs` passed. */
  async anyWithin(timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if ((await this.count()) > 0) return true;
      await new Promise((r) => setTimeout(r, 200));
    }
    return (await this.count()) > 0;
  }

  async stop(stream?: string): Promise<void> {
    const exited = new Promise((resolve) => this.child.once('exit', resolve));
    this.child.send({ type: 'stop', stream });
    await exited;
  }
}

/** True when a NATS server answers at `url`. */
export async function natsReachable(url: string): Promise<boolean> {
  try {
    const nc = await connect({ servers: url, timeout: 2000 });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}
