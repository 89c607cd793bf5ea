import { constants } from 'node:os';

/** Stable machine codes for SEQPACKET socket failures; match on `code`, not on the message. */
export type SeqpacketErrorCode =
  | 'ERR_SEQPACKET_SYSCALL'
  | 'ERR_SEQPACKET_TIMEOUT'
  | 'ERR_SEQPACKET_CLOSED'
  | 'ERR_SEQPACKET_EOF'
  | 'ERR_SEQPACKET_TRUNCATED'
  | 'ERR_SEQPACKET_INVALID_ARGUMENT'
  | 'ERR_SEQPACKET_BUSY'
  | 'ERR_SEQPACKET_ABORTED';

export class SeqpacketError extends Error {
  readonly code: SeqpacketErrorCode;
  /** errno name (e.g. `EPIPE`) for syscall failures. */
  readonly syscallCode: string | undefined;

  constructor(code: SeqpacketErrorCode, message: string, options?: { syscallCode?: string; cause?: unknown }) {
    super(message, options);
    this.name = 'SeqpacketError';
    this.code = code;
    this.syscallCode = options?.syscallCode;
  }
}

const errnoNames = new Map<number, string>(Object.entries(constants.errno).map(([name, n]) => [n, name]));

/** `failed to <what>: EPIPE (errno 32)` as a SeqpacketError carrying the errno name. */
export function syscallError(what: string, errno: number): SeqpacketError {
  const name = errnoNames.get(errno) ?? `errno ${errno}`;
  return new SeqpacketError('ERR_SEQPACKET_SYSCALL', `failed to ${what}: ${name} (errno ${errno})`, { syscallCode: name });
}
