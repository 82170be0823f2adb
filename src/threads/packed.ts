// Flat values packed into one buffer of its own, so a batch crosses to another thread as one
// transferred buffer (moved, not copied or cloned value by value): each value a tag byte, then a
// float64 for a number, or a uint32 byte length and the UTF-8 bytes for a string.
import { Buffer } from 'node:buffer';

export type PackedValue = string | number | null;

const NULL = 0;
const STRING = 1;
const NUMBER = 2;

/** Packs `values` into a buffer no other view shares (not Node's pool), so its ArrayBuffer can be transferred. */
export function pack(values: readonly PackedValue[]): Uint8Array<ArrayBuffer> {
  let size = 0;
  for (const value of values) size += 1 + (typeof value === 'string' ? 4 + Buffer.byteLength(value) : typeof value === 'number' ? 8 : 0);
  const bytes = Buffer.allocUnsafeSlow(size);
  let at = 0;
  for (const value of values) {
    if (typeof value === 'string') {
      bytes[at] = STRING;
      const length = bytes.write(value, at + 5);
      bytes.writeUInt32LE(length, at + 1);
      at += 5 + length;
    } else if (typeof value === 'number') {
      bytes[at] = NUMBER;
      bytes.writeDoubleLE(value, at + 1);
      at += 9;
    } else bytes[at++] = NULL;
  }
  return bytes;
}

/** Reads back what `pack` wrote, one value at a time, in order. */
export function unpacker(packed: Uint8Array): { next(): PackedValue; done(): boolean } {
  const bytes = Buffer.from(packed.buffer, packed.byteOffset, packed.byteLength);
  let at = 0;
  return {
    next() {
      const tag = bytes[at];
      if (tag === STRING) {
        const end = at + 5 + bytes.readUInt32LE(at + 1);
        const value = bytes.toString('utf8', at + 5, end);
        at = end;
        return value;
      }
      if (tag === NUMBER) {
        const value = bytes.readDoubleLE(at + 1);
        at += 9;
        return value;
      }
      if (tag !== NULL) throw new Error(`not a packed value at byte ${at}`);
      at++;
      return null;
    },
    done: () => at >= bytes.length,
  };
}
