import { spawn } from 'node:child_process';
import { once } from 'node:events';

/**
 * Runs `expression` in every worker thread of a process started with `--inspect=127.0.0.1:0`, through
 * the inspector protocol (NodeWorker domain): a crash (`process.exit(70)`) or a hang (a busy loop)
 * made from outside, with no switch in the relay's code. Returns once each worker has answered or
 * gone. Node 20 has WebSocket only behind a flag, so a small client process does it.
 */
export async function evaluateInWorkerThreads(inspectorUrl: string, expression: string): Promise<void> {
  const client = `
    const ws = new WebSocket(process.argv[1]);
    let id = 0;
    const send = (method, params) => ws.send(JSON.stringify({ id: ++id, method, params }));
    ws.onopen = () => send('NodeWorker.enable', { waitForDebuggerOnStart: false });
    ws.onmessage = ({ data }) => {
      const message = JSON.parse(data);
      if (message.method === 'NodeWorker.attachedToWorker') {
        const evaluate = { id: 1, method: 'Runtime.evaluate', params: { expression: process.argv[2] } };
        send('NodeWorker.sendMessageToWorker', { sessionId: message.params.sessionId, message: JSON.stringify(evaluate) });
      }
      const answered = message.method === 'NodeWorker.receivedMessageFromWorker' && JSON.parse(message.params.message).id === 1;
      if (answered || message.method === 'NodeWorker.detachedFromWorker') ws.close();
    };
    ws.onclose = () => process.exit(0);
    ws.onerror = (event) => { console.error(event.message ?? 'inspector connection failed'); process.exit(1); };
  `;
  const child = spawn(process.execPath, ['--experimental-websocket', '--no-warnings', '-e', client, inspectorUrl, expression], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const [exitCode] = (await once(child, 'exit')) as [number | null];
  if (exitCode !== 0) throw new Error(`the inspector client exited with ${exitCode}`);
}

/** Makes every worker thread exit with `code`, as a crash would. */
export const exitWorkerThreads = (inspectorUrl: string, code: number): Promise<void> => evaluateInWorkerThreads(inspectorUrl, `process.exit(${code})`);

/** Blocks every worker thread's event loop for good (from its next turn), as a hung worker would. */
export const hangWorkerThreads = (inspectorUrl: string): Promise<void> => evaluateInWorkerThreads(inspectorUrl, 'setImmediate(() => { for (;;); })');

/** The `ws://` address a process started with `--inspect` printed. */
export function inspectorUrlIn(lines: string[]): string {
  const url = lines.map((line) => /Debugger listening on (ws:\/\/\S+)/.exec(line)?.[1]).find(Boolean);
  if (!url) throw new Error(`no inspector address in the output:\n${lines.join('\n')}`);
  return url;
}
