/** Stable machine codes for ZDS failures; match on `code`, not on the message. */
export type ZdsErrorCode =
  | 'ERR_ZDS_NO_CONNECTION'
  | 'ERR_ZDS_ACK_ERROR'
  | 'ERR_ZDS_CONNECTION_CLOSED'
  | 'ERR_ZDS_TIMEOUT'
  | 'ERR_ZDS_PROTOCOL'
  | 'ERR_ZDS_SEND_FAILED'
  | 'ERR_ZDS_ABORTED'
  | 'ERR_ZDS_INVALID_ARGUMENT';

export class ZdsError extends Error {
  readonly code: ZdsErrorCode;
  /**
   * Worth retrying later (upstream `meshdataplane_linux.go`: a failed ztunnel add leaves the pod `pending` and is
   * retried). Only bad arguments are not.
   */
  readonly retryable: boolean;

  constructor(code: ZdsErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ZdsError';
    this.code = code;
    this.retryable = code !== 'ERR_ZDS_INVALID_ARGUMENT';
  }
}
