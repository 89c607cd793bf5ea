import { buildIptablesReconcileDocument } from './buildIptablesReconcileDocument.ts';
import type { CommandRunner } from './commandRunner.ts';
import { classifyIptablesSave, type IptablesBackend, type IptablesFamily, type IptablesFlavor } from './detectIptablesBackend.ts';
import { restoreIptables, xtablesRunOptions } from './iptablesExec.ts';
import { type IptablesState, parseIptablesSave } from './iptablesState.ts';

export interface PodIptablesBackend {
  /** Where this netns's rules are read and written: the netns's own ISTIO_* backend if it has one, else the node's. */
  backend: IptablesBackend;
  /** Other backends that also hold ISTIO_* state in this netns (a second copy, to be removed). */
  duplicates: IptablesBackend[];
}

/**
 * One netns's rules live in one backend. When the node's backend holds none of this netns's
 * ISTIO_* state but another one (`node.adoptable`) does, that one is adopted: reconciling writes
 * there, never a second copy next to it. When both hold some, the node's copy stays and the
 * others are reported as duplicates. Costs one `iptables-*-save` per adoptable backend.
 */
export async function choosePodIptablesBackend(runner: CommandRunner, node: IptablesBackend, netns: string): Promise<PodIptablesBackend> {
  const others = node.adoptable ?? [];
  if (others.length === 0) return { backend: node, duplicates: [] };
  const holding: IptablesBackend[] = [];
  for (const other of others) if (await holdsIstioState(runner, other, netns)) holding.push(other);
  const [first, ...rest] = holding;
  if (first === undefined) return { backend: node, duplicates: [] };
  if (await holdsIstioState(runner, node, netns)) return { backend: node, duplicates: holding };
  return { backend: first, duplicates: rest };
}

/** Whether the node's backend, or one it could adopt, holds ISTIO_* state in `netns` (IPv4, as below). */
export async function holdsIstioIptablesState(runner: CommandRunner, node: IptablesBackend, netns: string): Promise<boolean> {
  for (const backend of [node, ...(node.adoptable ?? [])]) if (await holdsIstioState(runner, backend, netns)) return true;
  return false;
}

/** IPv4 only: both capture modes always write IPv4 rules (IPv6 ones only next to them). */
async function holdsIstioState(runner: CommandRunner, backend: IptablesBackend, netns: string): Promise<boolean> {
  const stdout = await save(runner, backend, 'ipv4', netns);
  return stdout !== undefined && classifyIptablesSave(stdout).istio.length > 0;
}

/**
 * Removes every ISTIO_* chain, and every jump into one, that `backend` holds in `netns` (both
 * families, one atomic restore per table), plus the `planned` rules found in other chains (e.g. a
 * sidecar's CONNMARK rules in mangle OUTPUT, which jump nowhere). Rules of others are kept.
 * Returns whether anything was removed.
 */
export async function removeIstioIptablesState(
  runner: CommandRunner,
  backend: IptablesBackend,
  netns: string,
  planned: Partial<Record<IptablesFamily, IptablesState>> = {},
): Promise<boolean> {
  let removed = false;
  for (const family of ['ipv4', 'ipv6'] as const) {
    const stdout = await save(runner, backend, family, netns);
    if (stdout === undefined || classifyIptablesSave(stdout).istio.length === 0) continue;
    const document = buildIptablesReconcileDocument('', planned[family] ?? new Map(), parseIptablesSave(stdout));
    await restoreIptables(runner, backend, family, netns, document);
    removed = true;
  }
  return removed;
}

/** The flavors, for logs: `legacy`, `nft`. */
export function flavorsOf(backends: readonly IptablesBackend[]): IptablesFlavor[] {
  return backends.map((b) => b.flavor);
}

async function save(runner: CommandRunner, backend: IptablesBackend, family: IptablesFamily, netns: string): Promise<string | undefined> {
  try {
    return (await runner.run([backend.binaries[family].save], xtablesRunOptions(backend, netns))).stdout;
  } catch {
    return undefined;
  }
}
