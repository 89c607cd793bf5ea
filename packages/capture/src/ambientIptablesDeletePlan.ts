import { AMBIENT_CHAIN } from './ambientConfig.ts';
import type { AmbientConfig } from './ambientConfig.ts';

const PRERT = AMBIENT_CHAIN.prerouting;
const OUTPUT = AMBIENT_CHAIN.output;
const POSTRT = AMBIENT_CHAIN.hostPostrouting;

/** `iptables` arguments (no binary) that remove every possible in-pod ambient jump and chain. */
const DELETE_ARGS: readonly (readonly string[])[] = [
  ['-t', 'mangle', '-D', 'PREROUTING', '-j', PRERT],
  ['-t', 'mangle', '-D', 'OUTPUT', '-j', OUTPUT],
  ['-t', 'nat', '-D', 'OUTPUT', '-j', OUTPUT],
  ['-t', 'raw', '-D', 'PREROUTING', '-j', PRERT],
  ['-t', 'raw', '-D', 'OUTPUT', '-j', OUTPUT],
  ['-t', 'nat', '-D', 'PREROUTING', '-j', PRERT],
  // Flush before delete: a chain must be empty and unreferenced to be removed.
  ['-t', 'mangle', '-F', PRERT],
  ['-t', 'mangle', '-F', OUTPUT],
  ['-t', 'nat', '-F', PRERT],
  ['-t', 'nat', '-F', OUTPUT],
  ['-t', 'raw', '-F', PRERT],
  ['-t', 'raw', '-F', OUTPUT],
  ['-t', 'mangle', '-X', PRERT],
  ['-t', 'mangle', '-X', OUTPUT],
  ['-t', 'nat', '-X', PRERT],
  ['-t', 'nat', '-X', OUTPUT],
  ['-t', 'raw', '-X', PRERT],
  ['-t', 'raw', '-X', OUTPUT],
];

/** Per-family `iptables` / `ip6tables` argument lists; `v6` is empty unless IPv6 is enabled. */
export interface AmbientIptablesDeletePlan {
  readonly v4: readonly (readonly string[])[];
  readonly v6: readonly (readonly string[])[];
}

/**
 * Upstream's in-pod delete: run every command of each family in order, ignoring failures
 * (most targets are optional, e.g. the raw chains without DNS capture). The ip rule and loopback
 * route are removed afterwards, see `ambientPodRoutes`.
 */
export function ambientPodIptablesDeletePlan(config: AmbientConfig): AmbientIptablesDeletePlan {
  const copy = (): string[][] => DELETE_ARGS.map((args) => [...args]);
  return { v4: copy(), v6: config.enableIPv6 ? copy() : [] };
}

/**
 * Removal of the host probe rules (upstream `cni/pkg/iptables`, run before re-creating them at start-up): the jump,
 * then flush and delete of the owned chain, per family, ignoring failures (a clean node has none).
 */
export function ambientHostIptablesDeletePlan(config: AmbientConfig): AmbientIptablesDeletePlan {
  const args = (): string[][] => [
    ['-t', 'nat', '-D', 'POSTROUTING', '-j', POSTRT],
    ['-t', 'nat', '-F', POSTRT],
    ['-t', 'nat', '-X', POSTRT],
  ];
  return { v4: args(), v6: config.enableIPv6 ? args() : [] };
}
