import { statfs } from 'node:fs/promises';

export interface StorageSpace {
  /** Bytes the relay may still write (a filesystem's blocks reserved for root left out, as `df` shows). */
  freeBytes: number;
  sizeBytes: number;
}

/** The space of the filesystem that holds `path` (a SQLite database file). */
export async function storageSpace(path: string): Promise<StorageSpace> {
  const { bsize, bavail, blocks } = await statfs(path);
  return { freeBytes: bavail * bsize, sizeBytes: blocks * bsize };
}
