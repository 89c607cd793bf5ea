import { parseIpAddress, type IpAddress } from '@istio-cni/cni';

export interface DnsServers {
  readonly v4: readonly IpAddress[];
  readonly v6: readonly IpAddress[];
  /** `nameserver` values that are not plain addresses; upstream skips them too (`IPsSplitV4V6`). */
  readonly skipped: readonly string[];
}

/**
 * The `nameserver` addresses of a resolv.conf, split by family in file order, as upstream's
 * `dns.ClientConfigFromFile` + `IPsSplitV4V6`. Addresses are kept as written (`::127.0.0.53`),
 * which is what upstream puts into the rules.
 */
export function parseResolvConf(text: string): DnsServers {
  const v4: IpAddress[] = [];
  const v6: IpAddress[] = [];
  const skipped: string[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/[ \t]+/);
    if (fields[0] !== 'nameserver' || fields[1] === undefined) continue;
    try {
      const address = parseIpAddress(fields[1]);
      (address.family === 4 ? v4 : v6).push(address);
    } catch {
      skipped.push(fields[1]);
    }
  }
  return { v4, v6, skipped };
}
