/** Stable machine codes for every error this package throws; match on `code`, not on the message. */
export type DataplaneErrorCode =
  | 'ERR_DATAPLANE_COMMAND_FAILED'
  | 'ERR_DATAPLANE_COMMAND_TIMEOUT'
  | 'ERR_DATAPLANE_COMMAND_NOT_FOUND'
  | 'ERR_DATAPLANE_OUTPUT_TOO_LARGE'
  | 'ERR_DATAPLANE_INVALID_ARGUMENT'
  | 'ERR_DATAPLANE_NO_IPTABLES'
  | 'ERR_DATAPLANE_NFT_UNSUPPORTED'
  | 'ERR_DATAPLANE_NO_POD_ADDRESS'
  | 'ERR_DATAPLANE_STATE_CONFLICT'
  | 'ERR_DATAPLANE_SCRATCH_NETNS'
  | 'ERR_DATAPLANE_UNPARSABLE_STATE';

export class DataplaneError extends Error {
  readonly code: DataplaneErrorCode;

  constructor(code: DataplaneErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'DataplaneError';
    this.code = code;
  }
}
