import { once } from 'node:events';
import { connect, type Socket } from 'node:net';

export interface RawAnswer {
  socket: Socket;
  status: number;
  /** The response head (status line and headers) as sent. */
  head: string;
  /** The body its Content-Length announces. */
  body: string;
}

/**
 * Writes `text` as is on a fresh connection and reads one answer: for what an HTTP client
 * would not send (absolute-form targets, a declared body that never comes). The caller destroys
 * `socket` when done.
 */
export async function rawRequest(port: number, text: string): Promise<RawAnswer> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  let received = '';
  const answer = new Promise<{ head: string; body: string }>((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => {
      received += chunk.toString('latin1');
      const end = received.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = received.slice(0, end);
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      const body = received.slice(end + 4);
      if (body.length >= length) resolve({ head, body: Buffer.from(body, 'latin1').toString('utf8') });
    });
    socket.once('close', () => reject(new Error(`connection closed before a full answer: ${JSON.stringify(received)}`)));
  });
  socket.write(text);
  const { head, body } = await answer;
  return { socket, status: Number(head.split(' ')[1]), head, body };
}
