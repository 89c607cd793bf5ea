/**
 * The canonical in-memory result: the 1.1.0 shape, whatever version it was
 * read from. Addresses are kept as text in Go's normalised form.
 */
export interface ResultInterface {
  name: string;
  mac?: string;
  /** 1.1.0 (also written at 1.0.0, which shares the reference library's type). */
  mtu?: number;
  sandbox?: string;
  socketPath?: string;
  pciID?: string;
}

export interface ResultIPConfig {
  /** Index into `interfaces`. */
  interface?: number;
  /** CIDR, e.g. `10.1.0.5/24` (host address kept, not masked). */
  address: string;
  gateway?: string;
}

export interface ResultRoute {
  dst: string;
  gw?: string;
  mtu?: number;
  advmss?: number;
  priority?: number;
  table?: number;
  scope?: number;
}

export interface ResultDNS {
  nameservers?: string[];
  domain?: string;
  search?: string[];
  options?: string[];
}

export interface Result {
  /** The spec version this result was read from (empty 0.1.0/0.2.0 versions read as 0.2.0). */
  cniVersion: string;
  interfaces: ResultInterface[];
  ips: ResultIPConfig[];
  routes: ResultRoute[];
  dns: ResultDNS;
}
