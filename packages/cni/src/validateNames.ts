// Name validation from the reference library's pkg/utils, with its messages.

import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';

const VALID_NAME = /^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/;
const MAX_INTERFACE_NAME_LENGTH = 15;

// Go's unicode.IsSpace (differs from JS \s: includes U+0085, excludes U+FEFF).
const GO_SPACE = /[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

/** `utils.ValidateContainerID`. */
export function validateContainerId(containerId: string): void {
  if (containerId === '') throw new CniError(ErrorCode.UnknownContainer, 'missing containerID');
  if (!VALID_NAME.test(containerId)) {
    throw new CniError(ErrorCode.InvalidEnvironment, 'invalid characters in containerID', containerId);
  }
}

/** `utils.ValidateNetworkName`. */
export function validateNetworkName(networkName: string): void {
  if (networkName === '') throw new CniError(ErrorCode.InvalidNetworkConfig, 'missing network name:');
  if (!VALID_NAME.test(networkName)) {
    throw new CniError(ErrorCode.InvalidNetworkConfig, 'invalid characters found in network name', networkName);
  }
}

/** `utils.ValidateInterfaceName`: the kernel's dev_valid_name rules; length counts UTF-8 bytes. */
export function validateInterfaceName(ifName: string): void {
  const length = Buffer.byteLength(ifName, 'utf8');
  if (length === 0) throw new CniError(ErrorCode.InvalidEnvironment, 'interface name is empty');
  if (length > MAX_INTERFACE_NAME_LENGTH) {
    throw new CniError(
      ErrorCode.InvalidEnvironment,
      'interface name is too long',
      `interface name should be less than ${MAX_INTERFACE_NAME_LENGTH + 1} characters`,
    );
  }
  if (ifName === '.' || ifName === '..') {
    throw new CniError(ErrorCode.InvalidEnvironment, 'interface name is . or ..');
  }
  if (ifName.includes('/') || ifName.includes(':') || GO_SPACE.test(ifName)) {
    throw new CniError(ErrorCode.InvalidEnvironment, 'interface name contains / or : or whitespace characters');
  }
}
