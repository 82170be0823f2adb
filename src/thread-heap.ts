/**
 * The young generation of each of the relay's worker threads (fan-out, storage, checkpoints). Node 24's
 * V8 lets a busy isolate's grow to 64 MB (Node 20's: 32 MB), garbage that stays resident until the next
 * scavenge, once per thread; a few MB serve the short-lived allocations of one event's work as well.
 * The main thread's is set on the command line (`--max-semi-space-size`: the image's ENTRYPOINT, `npm start`).
 */
export const WORKER_YOUNG_GENERATION_MB = 12;
