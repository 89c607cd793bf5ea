/** Stable machine codes of the ambient dataplane errors; match on `code`, not on the message. */
export type AmbientDataplaneErrorCode =
  | 'ERR_AMBIENT_NETNS'
  | 'ERR_AMBIENT_INVALID_ARGUMENT'
  | 'ERR_AMBIENT_PROC_ENTRY'
  | 'ERR_AMBIENT_POD_RULES'
  | 'ERR_AMBIENT_PROBE_SET'
  | 'ERR_AMBIENT_HOST_RULES'
  | 'ERR_AMBIENT_KUBELET_UID';

/**
 * Kept apart from `DataplaneError` (whose code union belongs to the sidecar layer) so the ambient
 * layer can grow without touching it; both carry `code` and `cause` the same way.
 */
export class AmbientDataplaneError extends Error {
  readonly code: AmbientDataplaneErrorCode;

  constructor(code: AmbientDataplaneErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AmbientDataplaneError';
    this.code = code;
  }
}
