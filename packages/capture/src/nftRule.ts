/** One nftables rule as data, in family `inet`. `index` (0-based) marks an upstream "insert at". */
export interface NftRule {
  readonly table: NftTable;
  readonly chain: string;
  /** Rule fragments, joined with single spaces when rendered (fragments may contain spaces). */
  readonly args: readonly string[];
  readonly index?: number;
}

/** Every nftables table this project writes (all in family `inet`); a name read back is ours only if listed here. */
export const NFT_TABLE_NAMES = [
  'istio-proxy-nat',
  'istio-proxy-mangle',
  'istio-proxy-raw',
  'istio-ambient-nat',
  'istio-ambient-mangle',
  'istio-ambient-raw',
] as const;

export type NftTable = (typeof NFT_TABLE_NAMES)[number];

export interface NftChainSpec {
  readonly name: string;
  /** Present for base chains. */
  readonly base?: {
    readonly type: 'nat' | 'filter' | 'route';
    readonly hook: 'prerouting' | 'output' | 'postrouting';
    readonly priority: number;
  };
}

export interface NftTableLayout {
  readonly name: NftTable;
  /** Candidate chains in declaration order. */
  readonly chains: readonly NftChainSpec[];
}

/**
 * How a rule list becomes a transaction: the tables in order and which candidate chains are
 * declared. Sidecar declares only chains owning a rule; ambient also declares every chain a
 * `jump` targets (upstream ambient declares `istio-prerouting` even when it is empty).
 */
export interface NftLayout {
  readonly tables: readonly NftTableLayout[];
  readonly declareJumpTargets: boolean;
}

/** Tables in transaction order, each with its candidate chains in declaration order. */
export const NFT_TABLES: readonly NftTableLayout[] = [
  {
    name: 'istio-proxy-nat',
    chains: [
      { name: 'prerouting', base: { type: 'nat', hook: 'prerouting', priority: -100 } },
      { name: 'output', base: { type: 'nat', hook: 'output', priority: -100 } },
      { name: 'istio-inbound' },
      { name: 'istio-redirect' },
      { name: 'istio-in-redirect' },
      { name: 'istio-output' },
      { name: 'istio-output-dns' },
    ],
  },
  {
    name: 'istio-proxy-mangle',
    chains: [
      { name: 'prerouting', base: { type: 'filter', hook: 'prerouting', priority: -150 } },
      { name: 'output', base: { type: 'route', hook: 'output', priority: -150 } },
      { name: 'istio-divert' },
      { name: 'istio-tproxy' },
      { name: 'istio-inbound' },
      { name: 'istio-drop' },
    ],
  },
  {
    name: 'istio-proxy-raw',
    chains: [
      { name: 'prerouting', base: { type: 'filter', hook: 'prerouting', priority: -300 } },
      { name: 'output', base: { type: 'filter', hook: 'output', priority: -300 } },
      { name: 'istio-inbound' },
      { name: 'istio-output-dns' },
    ],
  },
];

/** The istio-nftables sidecar layout (upstream `tools/istio-nftables`). */
export const SIDECAR_NFT_LAYOUT: NftLayout = { tables: NFT_TABLES, declareJumpTargets: false };
