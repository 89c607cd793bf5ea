import { LATEST_VERSION } from './versions.ts';

/** The error object a plugin prints on stdout (CNI spec "Error" section). */
export interface CniErrorJson {
  cniVersion: string;
  code: number;
  msg: string;
  details?: string;
}

/** A CNI error: a well-known or plugin-specific code, a message and optional details. */
export class CniError extends Error {
  readonly code: number;
  readonly details: string;

  constructor(code: number, msg: string, details = '') {
    super(msg);
    this.name = 'CniError';
    this.code = code;
    this.details = details;
  }

  /** The wire form; `details` is left out when empty, as the reference library does. */
  toJSON(cniVersion: string = LATEST_VERSION): CniErrorJson {
    const json: CniErrorJson = { cniVersion, code: this.code, msg: this.message };
    if (this.details !== '') json.details = this.details;
    return json;
  }
}
