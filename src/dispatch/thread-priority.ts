import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * The fan-out's niceness: when the cores are short, the kernel gives a thread at 10 about a tenth of
 * what a thread at 0 (the receive and storage threads) gets on the same core, so a backlog drain takes
 * what answering webhooks leaves instead of half of it. Raising one's niceness needs no privilege.
 */
export const FANOUT_NICENESS = 10;

/**
 * Sets the calling thread's niceness, not the process's: on Linux `/proc/thread-self` names the
 * thread's own id, which setpriority takes. Throws elsewhere (no such file) or where the kernel
 * refuses; the thread then keeps the process's priority, which changes speed, never results.
 */
export function setThreadNiceness(niceness: number): void {
  const threadId = Number(readlinkSync('/proc/thread-self').split('/').pop());
  setPriority(threadId, niceness);
}
