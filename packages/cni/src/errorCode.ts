/** Well-known CNI error codes (CNI spec, "Error" section). */
export const ErrorCode = {
  IncompatibleVersion: 1,
  UnsupportedField: 2,
  UnknownContainer: 3,
  InvalidEnvironment: 4,
  IoFailure: 5,
  DecodingFailure: 6,
  InvalidNetworkConfig: 7,
  InvalidNetNS: 8,
  TryAgainLater: 11,
  PluginNotAvailable: 50,
  LimitedConnectivity: 51,
  Internal: 999,
} as const;

export type ErrorCodeValue = (typeof ErrorCode)[keyof typeof ErrorCode];
