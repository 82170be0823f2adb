import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { request } from 'node:http';
import { createServer } from 'node:net';

export interface Spawned {
  child: ChildProcess;
  port: number;
  /** Bytes the process wrote to stdout so far (read through a pipe, as a container runtime does). */
  stdoutBytes(): number;
  /** The next stdout line (a log record) containing `text`. */
  nextLine(text: string): Promise<string>;
  /** CPU seconds (user + system) the process has used so far. */
  cpuSeconds(): number;
  /** The same, of the main thread only (the one that receives). */
  mainThreadCpuSeconds(): number;
  /** The same, of its threads of that name (`/proc/<pid>/task/<tid>/comm`, e.g. the relay's `fanout` worker); 0 when none. */
  threadCpuSeconds(name: string): number;
  /** SIGTERM, then wait for the exit (SIGKILL after 15 s). */
  stop(): Promise<void>;
}

/** Linux clock ticks per second (`getconf CLK_TCK`), 100 on every common kernel. */
const CLOCK_TICKS = 100;

/** utime + stime of a process from /proc; a figure that the other tenants of the machine do not inflate. */
export function cpuSecondsOf(pid: number, statFile = `/proc/${pid}/stat`): number {
  const stat = readFileSync(statFile, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** CPU seconds used so far by the threads of a process that carry that name (Node names a worker's thread after its `name`). */
export function threadCpuSeconds(pid: number, name: string): number {
  let total = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      if (readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim() === name) total += cpuSecondsOf(pid, `/proc/${pid}/task/${tid}/stat`);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return total;
}

/** CPU seconds used so far by every process of that name (`/proc/<pid>/comm`), e.g. a local server's backends. */
export function cpuSecondsOfNamed(name: string): number {
  let total = 0;
  for (const pid of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === name) total += cpuSecondsOf(Number(pid));
    } catch {
      // The process ended between the listing and the read.
    }
  }
  return total;
}

/**
 * Busy CPU seconds of the whole machine since boot, all cores (/proc/stat: everything but idle and
 * iowait): the load generator, the target and NATS share the cores; this tells whether all were busy.
 */
export function machineBusySeconds(): number {
  const total = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] as string;
  const ticks = total.trim().split(/\s+/).slice(1, 9).map(Number);
  const [user, nice, system, , , irq, softirq, steal] = ticks as [number, number, number, number, number, number, number, number];
  return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS;
}

/** A port nobody listens on right now (127.0.0.1 only). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Resolves once anything answers HTTP on the port (any status). */
async function waitForHttp(port: number, child: ChildProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`target exited with code ${child.exitCode} before listening`);
    const answered = await new Promise<boolean>((resolve) => {
      const req = request({ host: '127.0.0.1', port, path: '/healthz', method: 'GET' }, (res) => {
        res.resume();
        resolve(true);
      });
      req.on('error', () => resolve(false));
      req.end();
    });
    if (answered) return;
    if (Date.now() > deadline) throw new Error(`nothing listened on ${port} within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface SpawnOptions {
  args: string[];
  env: Record<string, string>;
  port: number;
  cwd: string;
  /** Longest wait for it to answer HTTP (30 s unless given): a relay may set work aside before it listens. */
  startTimeoutMs?: number;
}

/**
 * Starts `node <args>` and waits until it answers HTTP on `port`. Its stdout (the relay's log) is
 * drained from a pipe, as in a container, not written to a file on the disk the database fsyncs to.
 */
export async function spawnServer({ args, env, port, cwd, startTimeoutMs }: SpawnOptions): Promise<Spawned> {
  const child = spawn(process.execPath, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'inherit'] });
  let stdoutBytes = 0;
  const waiters: { text: string; resolve(line: string): void }[] = [];
  let partial = '';
  child.stdout?.on('data', (chunk: Buffer) => {
    stdoutBytes += chunk.length;
    if (waiters.length === 0) return;
    const lines = (partial + chunk.toString('utf8')).split('\n');
    partial = lines.pop() as string;
    for (const line of lines) {
      const found = waiters.findIndex((w) => line.includes(w.text));
      if (found >= 0) waiters.splice(found, 1)[0]?.resolve(line);
    }
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    await waitForHttp(port, child, startTimeoutMs);
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  return {
    child,
    port,
    stdoutBytes: () => stdoutBytes,
    nextLine: (text) => new Promise((resolve) => waiters.push({ text, resolve })),
    cpuSeconds: () => cpuSecondsOf(child.pid as number),
    mainThreadCpuSeconds: () => cpuSecondsOf(child.pid as number, `/proc/${child.pid}/task/${child.pid}/stat`),
    threadCpuSeconds: (name) => threadCpuSeconds(child.pid as number, name),
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const killer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      child.kill('SIGTERM');
      await exited;
      clearTimeout(killer);
    },
  };
}

/** Runs `node <args>` to completion; rejects on a non-zero exit. */
export function runNode(args: string[], env: Record<string, string>, cwd: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'ignore', 'inherit'] });
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`node ${args.join(' ')} exited with ${code}`))));
  });
}
