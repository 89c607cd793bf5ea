import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REFERENCE_PLUGIN_DIR } from './rigPaths.ts';
import { runCommand } from './runCommand.ts';

/** The primary pod network: the reference bridge + host-local + portmap, the way a cluster's CNI lays it down. */
export interface PrimaryNetwork {
  name: string;
  bridge: string;
  subnet: string;
  conflistPath: string;
  conflist: { cniVersion: string; name: string; plugins: Record<string, unknown>[] };
}

export interface PrimaryNetworkOptions {
  confDir: string;
  binDir: string;
  /** host-local's lease store; keep it in scratch so nothing lands in /var/lib/cni/networks. */
  ipamDataDir: string;
  name?: string;
  bridge?: string;
  subnet?: string;
  /** One subnet per family, a host-local range each (a dual-stack pod gets an address of each); overrides `subnet`. */
  subnets?: readonly string[];
  fileName?: string;
  /** Masquerade traffic leaving the subnet (default true); a routed multi-node cluster turns it off. */
  ipMasq?: boolean;
  /** The conflist's cniVersion (default 1.0.0); 1.1.0 makes containerd 2.x run STATUS on every plugin. */
  cniVersion?: string;
}

export const REFERENCE_PLUGINS = ['bridge', 'host-local', 'portmap', 'loopback'] as const;

/** Copies the reference plugins into binDir and writes the primary conflist into confDir. */
export function writePrimaryNetwork(options: PrimaryNetworkOptions): PrimaryNetwork {
  mkdirSync(options.binDir, { recursive: true });
  for (const plugin of REFERENCE_PLUGINS) copyFileSync(join(REFERENCE_PLUGIN_DIR, plugin), join(options.binDir, plugin));
  mkdirSync(options.ipamDataDir, { recursive: true });
  const name = options.name ?? 'e2e-primary';
  const bridge = options.bridge ?? 'e2ebr0';
  const subnets = options.subnets ?? [options.subnet ?? '10.244.250.0/24'];
  const subnet = subnets[0] ?? '';
  const defaultRoute = (cidr: string) => ({ dst: cidr.includes(':') ? '::/0' : '0.0.0.0/0' });
  const conflist = {
    cniVersion: options.cniVersion ?? '1.0.0',
    name,
    plugins: [
      {
        type: 'bridge',
        bridge,
        isGateway: true,
        ipMasq: options.ipMasq ?? true,
        hairpinMode: true,
        ipam: {
          type: 'host-local',
          ranges: subnets.map((s) => [{ subnet: s }]),
          routes: subnets.map(defaultRoute),
          dataDir: options.ipamDataDir,
        },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
  const conflistPath = join(options.confDir, options.fileName ?? '10-e2e-primary.conflist');
  writeFileSync(conflistPath, `${JSON.stringify(conflist, null, 2)}\n`);
  return { name, bridge, subnet, conflistPath, conflist };
}

const PORTMAP_CHAIN = /^CNI-HOSTPORT-/;

/**
 * Removes what the reference plugins leave by design after the last DEL: the bridge link and
 * portmap's shared nat chains (with the jumps into them). Chains that existed before (`keepChains`)
 * are left alone.
 */
export async function removePrimaryNetworkLeftovers(network: PrimaryNetwork, keepChains: ReadonlySet<string> = new Set()): Promise<void> {
  await runCommand(['ip', 'link', 'delete', network.bridge], { allowFailure: true });
  for (const iptables of ['iptables', 'ip6tables']) {
    const { stdout, exitCode } = await runCommand([iptables, '-w', '-t', 'nat', '-S'], { allowFailure: true });
    if (exitCode !== 0) continue;
    const rules = stdout
      .split('\n')
      .map(splitIptablesLine)
      .filter((argv) => argv.length > 0);
    const chains = rules
      .filter((argv) => argv[0] === '-N' && PORTMAP_CHAIN.test(argv[1] ?? '') && !keepChains.has(argv[1] ?? ''))
      .map((argv) => argv[1] ?? '');
    if (chains.length === 0) continue;
    for (const argv of rules) {
      const target = argv[argv.indexOf('-j') + 1];
      if (argv[0] === '-A' && !chains.includes(argv[1] ?? '') && target !== undefined && chains.includes(target)) {
        await runCommand([iptables, '-w', '-t', 'nat', '-D', ...argv.slice(1)], { allowFailure: true });
      }
    }
    for (const chain of chains) await runCommand([iptables, '-w', '-t', 'nat', '-F', chain], { allowFailure: true });
    for (const chain of chains) await runCommand([iptables, '-w', '-t', 'nat', '-X', chain], { allowFailure: true });
  }
}

/** Splits one `iptables -S` line into argv, honouring its double quotes (comments carry spaces). */
export function splitIptablesLine(line: string): string[] {
  const argv: string[] = [];
  let current = '';
  let inToken = false;
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i] ?? '';
    if (quoted) {
      if (ch === '\\' && line[i + 1] === '"') {
        current += '"';
        i++;
      } else if (ch === '"') {
        quoted = false;
      } else {
        current += ch;
      }
    } else if (ch === '"') {
      quoted = true;
      inToken = true;
    } else if (ch === ' ') {
      if (inToken) argv.push(current);
      current = '';
      inToken = false;
    } else {
      current += ch;
      inToken = true;
    }
  }
  if (inToken) argv.push(current);
  return argv;
}

/** portmap's shared nat chains already on the host, which cleanup must leave in place. */
export async function existingPortmapChains(): Promise<Set<string>> {
  const chains = new Set<string>();
  for (const iptables of ['iptables', 'ip6tables']) {
    const { stdout } = await runCommand([iptables, '-w', '-t', 'nat', '-S'], { allowFailure: true });
    for (const argv of stdout.split('\n').map(splitIptablesLine)) {
      if (argv[0] === '-N' && PORTMAP_CHAIN.test(argv[1] ?? '')) chains.add(argv[1] ?? '');
    }
  }
  return chains;
}
