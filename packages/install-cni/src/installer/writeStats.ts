/** What a pass wrote: a pass over an unchanged node writes nothing. */
export interface WriteStats {
  bytesWritten: number;
  filesWritten: string[];
}

export function newWriteStats(): WriteStats {
  return { bytesWritten: 0, filesWritten: [] };
}

/** `data` is what was written, or its size in bytes. */
export function recordWrite(stats: WriteStats | undefined, path: string, data: string | Uint8Array | number): void {
  if (!stats) return;
  stats.bytesWritten += typeof data === 'number' ? data : typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
  stats.filesWritten.push(path);
}
