/** The most of a hook's answer kept with its attempt (contract section 16). */
export const KEPT_BODY_BYTES = 4096;

/**
 * The first `limit` bytes of a response body as text; the rest is never read (the stream is
 * cancelled, which closes the connection), so a huge or endless body costs at most `limit` bytes
 * kept. A body that stops coming (the attempt's timeout, a reset) keeps what came, marked truncated.
 */
export async function readCappedBody(body: ReadableStream<Uint8Array> | null, limit = KEPT_BODY_BYTES): Promise<{ body: string; bodyTruncated: boolean }> {
  if (!body) return { body: '', bodyTruncated: false };
  const kept = new Uint8Array(limit);
  let length = 0;
  let truncated = false;
  const reader = body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const room = limit - length;
      kept.set(value.subarray(0, room), length);
      length += Math.min(room, value.byteLength);
      if (value.byteLength > room) {
        truncated = true;
        break;
      }
    }
  } catch {
    truncated = true;
  } finally {
    await reader.cancel().catch(() => {});
  }
  return { body: new TextDecoder().decode(kept.subarray(0, length)), bodyTruncated: truncated };
}
