/** Every CNI spec version this library can read and write, oldest first. */
export const SUPPORTED_VERSIONS: readonly string[] = Object.freeze(['0.1.0', '0.2.0', '0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']);

/** The newest spec version implemented (what the reference library calls `version.Current()`). */
export const LATEST_VERSION = '1.1.0';

export interface VersionInfo {
  cniVersion: string;
  supportedVersions: string[];
}

/** The answer to the VERSION command. */
export function versionInfo(): VersionInfo {
  return { cniVersion: LATEST_VERSION, supportedVersions: [...SUPPORTED_VERSIONS] };
}
