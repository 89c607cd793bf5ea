import { AF_UNIX } from './libc.ts';
import { SeqpacketError } from './seqpacketError.ts';

const SUN_PATH_MAX = 108;

/**
 * Encodes a `struct sockaddr_un`. A leading `@` names an abstract socket (Linux): no file, the
 * name is NUL-prefixed and not NUL-terminated, as Go's net package does for `@name`.
 */
export function sockaddrUn(path: string): { addr: Buffer; len: number } {
  if (path === '' || path.includes('\0')) {
    throw new SeqpacketError('ERR_SEQPACKET_INVALID_ARGUMENT', `invalid unix socket path ${JSON.stringify(path)}`);
  }
  const abstract = path.startsWith('@');
  const name = Buffer.from(abstract ? path.slice(1) : path);
  const used = abstract ? 1 + name.length : name.length + 1;
  if (used > SUN_PATH_MAX) {
    throw new SeqpacketError(
      'ERR_SEQPACKET_INVALID_ARGUMENT',
      `unix socket path ${JSON.stringify(path)} is longer than ${SUN_PATH_MAX - 1} bytes`,
    );
  }
  const addr = Buffer.alloc(2 + SUN_PATH_MAX);
  addr.writeUInt16LE(AF_UNIX, 0);
  name.copy(addr, abstract ? 3 : 2);
  return { addr, len: 2 + used };
}
