import { readFileSync } from 'node:fs';
import { open, statfs } from 'node:fs/promises';

/** Files read by the command (pod manifest, resolv.conf) are small; anything larger is refused, not read. */
const MAX_INPUT_BYTES = 1024 * 1024;

/** Reads a text file of at most 1 MiB; a bigger file or a device (`/dev/zero`) fails instead of filling memory. */
export async function readBoundedTextFile(path: string): Promise<string> {
  const handle = await open(path, 'r');
  try {
    const buffer = Buffer.alloc(MAX_INPUT_BYTES + 1);
    let length = 0;
    while (length < buffer.length) {
      const { bytesRead } = await handle.read(buffer, length, buffer.length - length, null);
      if (bytesRead === 0) break;
      length += bytesRead;
    }
    if (length > MAX_INPUT_BYTES) throw new Error(`larger than ${MAX_INPUT_BYTES} bytes`);
    return buffer.subarray(0, length).toString('utf8');
  } finally {
    await handle.close();
  }
}

const NSFS_MAGIC = 0x6e736673;

/** A netns path must be a namespace file (`/proc/<pid>/ns/net`, a bind mount under /var/run/netns). */
export async function checkNetnsFile(path: string): Promise<void> {
  const stats = await statfs(path);
  if (stats.type !== NSFS_MAGIC) throw new Error('not a namespace file (expected e.g. /proc/<pid>/ns/net or /var/run/netns/<name>)');
}

/** UID of `name` from /etc/passwd (upstream `user.Lookup`), undefined when absent or unreadable. */
export function lookupUidInPasswd(name: string, passwdPath = '/etc/passwd'): string | undefined {
  let text: string;
  try {
    text = readFileSync(passwdPath, 'utf8');
  } catch {
    return undefined;
  }
  for (const line of text.split('\n')) {
    const fields = line.split(':');
    if (fields[0] === name && fields[2] !== undefined && /^[0-9]+$/.test(fields[2])) return fields[2];
  }
  return undefined;
}
