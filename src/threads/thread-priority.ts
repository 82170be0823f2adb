import { readlinkSync } from 'node:fs';
import { access } from 'node:fs/promises';
import { getPriority, setPriority } from 'node:os';

/** Linux's highest niceness. */
const NICEST = 19;

/**
 * Raises the calling thread's niceness by `by` (to at most 19), not the process's: on Linux
 * `/proc/thread-self` names the thread's own id, which setpriority takes. Raising it needs no
 * privilege. Rejects elsewhere (no such file) or where the kernel refuses, and the thread then keeps
 * the process's priority, which changes speed, never results.
 */
export async function raiseThreadNiceness(by: number): Promise<void> {
  // libuv's pool threads are shared by the process and made by whichever thread first uses the pool,
  // inheriting its niceness: used here first, they are made before this thread's is raised.
  await access('/proc/thread-self');
  // Read on this thread: read by the pool (async), the link would name a pool thread.
  const threadId = Number(readlinkSync('/proc/thread-self').split('/').pop());
  setPriority(threadId, Math.min(NICEST, getPriority(threadId) + by));
}
