import { spawn } from 'node:child_process';
import { once } from 'node:events';

/**
 * Runs `expression` in the fan-out worker thread of a process started with `--inspect=127.0.0.1:0`
 * (not in other workers, such as the WAL checkpointer), through the inspector protocol (NodeWorker
 * domain): a crash (`process.exit(70)`) or a hang (a busy loop) made from outside, with no switch in
 * the relay's code. Returns once the worker has answered or gone. Node 20 has WebSocket only behind
 * a flag, so a small client process does it.
 */
export async function evaluateInFanoutWorker(inspectorUrl: string, expression: string): Promise<void> {
  const client = `
    const ws = new WebSocket(process.argv[1]);
    let id = 0;
    let session;
    const send = (method, params) => ws.send(JSON.stringify({ id: ++id, method, params }));
    ws.onopen = () => send('NodeWorker.enable', { waitForDebuggerOnStart: false });
    ws.onmessage = ({ data }) => {
      const message = JSON.parse(data);
      if (message.method === 'NodeWorker.attachedToWorker' && message.params.workerInfo.url.includes('fanout-worker')) {
        session = message.params.sessionId;
        const evaluate = { id: 1, method: 'Runtime.evaluate', params: { expression: process.argv[2] } };
        send('NodeWorker.sendMessageToWorker', { sessionId: session, message: JSON.stringify(evaluate) });
      }
      if (session === undefined || message.params?.sessionId !== session) return;
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

/** Makes the fan-out worker exit with `code`, as a crash would. */
export const exitFanoutWorker = (inspectorUrl: string, code: number): Promise<void> => evaluateInFanoutWorker(inspectorUrl, `process.exit(${code})`);

/** Blocks the fan-out worker's event loop for good (from its next turn), as a hung worker would. */
export const hangFanoutWorker = (inspectorUrl: string): Promise<void> => evaluateInFanoutWorker(inspectorUrl, 'setImmediate(() => { for (;;); })');

/** The `ws://` address a process started with `--inspect` printed. */
export function inspectorUrlIn(lines: string[]): string {
  const url = lines.map((line) => /Debugger listening on (ws:\/\/\S+)/.exec(line)?.[1]).find(Boolean);
  if (!url) throw new Error(`no inspector address in the output:\n${lines.join('\n')}`);
  return url;
}
