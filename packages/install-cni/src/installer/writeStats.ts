/** What a pass wrote: a pass over an unchanged node writes nothing. */
export interface WriteStats {
  bytesWritten: number;
  filesWritten: string[];
}

export function newWriteStats(): WriteStats {
  return { bytesWritten: 0, filesWritten: [] };
}

export function recordWrite(stats: WriteStats | undefined, path: string, data: string | Uint8Array): void {
  if (!stats) return;
  stats.bytesWritten += typeof data === 'string' ? Buffer.byteLength(data) : data.byteLength;
  stats.filesWritten.push(path);
}
