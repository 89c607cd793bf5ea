const VALUE_LIMIT = 200;

/** JSON-quoted so whitespace, quotes and control characters stay visible; long values are cut. */
function quoteValue(value: string): string {
  if (value.length <= VALUE_LIMIT) return JSON.stringify(value);
  return `${JSON.stringify(value.slice(0, VALUE_LIMIT))}...(${value.length} characters)`;
}

/** A flag or environment value that cannot be used; the command exits before applying anything. */
export class UsageError extends Error {
  readonly code = 'ERR_ISTIO_IPTABLES_USAGE';
  /** The flag (`--envoy-port (-p)`) or variable (`env PROXY_UID`) the value came from. */
  readonly source: string;
  readonly value: string | undefined;

  constructor(source: string, value: string | undefined, reason: string) {
    super(value === undefined ? `${source}: ${reason}` : `invalid value ${quoteValue(value)} for ${source}: ${reason}`);
    this.name = 'UsageError';
    this.source = source;
    this.value = value;
  }
}
