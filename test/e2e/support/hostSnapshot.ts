import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { KUBELET_KERNEL_TUNABLES } from '../cluster/node.ts';
import { cgroupHierarchies } from './cgroupHierarchies.ts';
import { putBackFirstUseArtefacts } from './firstUseArtefacts.ts';
import { type HostSnapshot, hostLeaks, normalizeRuleDump, persistentLeaks } from './hostLeaks.ts';
import { runCommand } from './runCommand.ts';

export { type HostSnapshot, hostLeaks, persistentLeaks } from './hostLeaks.ts';

const RULE_DUMPS: Record<string, readonly string[]> = {
  // Without -t, iptables-legacy-save dumps the tables that exist and creates none.
  'iptables-legacy': ['iptables-legacy-save'],
  'ip6tables-legacy': ['ip6tables-legacy-save'],
  nft: ['nft', 'list', 'ruleset'],
};

/** /proc/net/<file> lists the legacy tables of the reader's netns; reading it creates none. */
const LEGACY_TABLE_NAMES: Record<string, string> = {
  'iptables-legacy': '/proc/net/ip_tables_names',
  'ip6tables-legacy': '/proc/net/ip6_tables_names',
};

const CNI_STATE_DIRS = ['/var/lib/cni/results', '/var/lib/cni/networks'];

/**
 * Directories whose entries a node agent, the rig or a cluster writes on the host, and the host's
 * binfmt_misc registrations (the arm64 image is built under qemu-user registered in a private
 * instance, never the host's).
 */
const HOST_PATH_DIRS = ['/run', '/etc/cni/net.d', '/opt/cni/bin', '/var/lib/cni', '/proc/sys/fs/binfmt_misc'];

/**
 * The machine's own state under those directories that a first use creates and nothing removes:
 * util-linux's libmount makes `/run/mount` (its utab and lock) the first time `mount` or `umount`
 * runs, so on a new machine the tests' bind mounts would otherwise count as a leftover.
 */
const MACHINE_STATE_PATHS = new Set(['/run/mount']);

/** Host-wide sysctls the rig and the cluster write: kubelet's kernel tunables, the bridge gateway's forwarding. */
const SYSCTLS = [
  ...KUBELET_KERNEL_TUNABLES,
  'net/ipv4/ip_forward',
  'net/ipv6/conf/all/forwarding',
  'net/bridge/bridge-nf-call-iptables',
  'net/bridge/bridge-nf-call-ip6tables',
];

const WATCHED_COMMANDS = new Set([
  'etcd',
  'kube-apiserver',
  'kube-controller',
  'kube-scheduler',
  'kubelet',
  'containerd',
  'containerd-shim',
  'containerd-shim-runc-v2',
  'runc',
  'pause',
  'install-cni',
  'istio-cni',
  'crictl',
  'cnitool',
  'helm',
]);

async function dump(argv: readonly string[]): Promise<string[]> {
  const { stdout, exitCode } = await runCommand(argv, { allowFailure: true });
  if (exitCode !== 0) return [`<${argv[0]} exited ${exitCode}>`];
  return normalizeRuleDump(argv[0]?.endsWith('-save') === true ? 'iptables-save' : 'nft', stdout);
}

async function tables(): Promise<string[]> {
  const found: string[] = [];
  for (const [name, file] of Object.entries(LEGACY_TABLE_NAMES)) {
    const names = existsSync(file) ? readFileSync(file, 'utf8').split('\n') : [];
    for (const table of names.filter((t) => t !== '')) found.push(`${name} ${table}`);
  }
  const { stdout, exitCode } = await runCommand(['nft', 'list', 'tables'], { allowFailure: true });
  if (exitCode !== 0) found.push(`<nft list tables exited ${exitCode}>`);
  for (const line of stdout.split('\n').filter((l) => l.startsWith('table '))) found.push(`nft ${line.trim()}`);
  return found;
}

function entries(dir: string): string[] {
  try {
    return readdirSync(dir).map((entry) => join(dir, entry));
  } catch {
    return [];
  }
}

/**
 * Top-level cgroup directories only: whatever a run nests deeper sits under a top-level directory it
 * created (kubelet's cgroup root, a containerd namespace), which cannot go while anything is left in
 * it. Deeper levels would also show every session the machine's own supervisor starts meanwhile.
 */
function cgroups(): string[] {
  return cgroupHierarchies().flatMap((hierarchy) =>
    entries(hierarchy).filter((path) => statSync(path, { throwIfNoEntry: false })?.isDirectory()),
  );
}

function sysctls(): string[] {
  return SYSCTLS.filter((key) => existsSync(`/proc/sys/${key}`)).map((key) => `${key}=${readFileSync(`/proc/sys/${key}`, 'utf8').trim()}`);
}

export async function takeHostSnapshot(): Promise<HostSnapshot> {
  const rules: Record<string, string[]> = {};
  for (const [name, argv] of Object.entries(RULE_DUMPS)) rules[name] = await dump(argv);
  const links = (await runCommand(['ip', '-o', 'link', 'show'])).stdout
    .split('\n')
    .map((line) => /^\d+:\s+([^:@\s]+)/.exec(line)?.[1])
    .filter((name): name is string => name !== undefined);
  const ipsets = (await runCommand(['ipset', 'list', '-n'], { allowFailure: true })).stdout.split('\n').filter((s) => s !== '');
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((mp): mp is string => mp !== undefined);
  // Zombies are skipped: a shim that exited is reparented to PID 1, which here reaps lazily.
  const processes = (await runCommand(['ps', '-eo', 'pid=,stat=,comm=', '--no-headers'])).stdout
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter(([, stat, comm]) => !(stat ?? '').startsWith('Z') && WATCHED_COMMANDS.has(comm ?? ''))
    .map(([pid, , comm]) => `${pid} ${comm}`);
  return {
    netns: existsSync('/var/run/netns') ? readdirSync('/var/run/netns').sort() : [],
    links: links.sort(),
    rules,
    tables: (await tables()).sort(),
    ipsets: ipsets.sort(),
    mounts: mounts.sort(),
    cgroups: cgroups().sort(),
    sysctls: sysctls(),
    hostPaths: HOST_PATH_DIRS.flatMap(entries)
      .filter((path) => !MACHINE_STATE_PATHS.has(path))
      .sort(),
    cniState: CNI_STATE_DIRS.flatMap(entries).sort(),
    processes: processes.sort(),
  };
}

const SETTLE_STEP_MS = 2000;

/**
 * What the host holds now and did not at `before`, looked at again every 2 s for up to `settleMs`
 * while anything is reported: what another process on the machine had up for a while (its own
 * test's netns, a veth, a short-lived agent) drops out; what a run left behind stays. Each look first
 * puts back what the run's first use of the host's tools created, once nothing uses it
 * (firstUseArtefacts.ts).
 */
export async function settledHostLeaks(before: HostSnapshot, settleMs: number): Promise<string[]> {
  await putBackFirstUseArtefacts(before);
  let leaks = hostLeaks(before, await takeHostSnapshot());
  for (let waited = 0; leaks.length > 0 && waited < settleMs; waited += SETTLE_STEP_MS) {
    await sleep(SETTLE_STEP_MS);
    await putBackFirstUseArtefacts(before);
    leaks = persistentLeaks(leaks, hostLeaks(before, await takeHostSnapshot()));
  }
  return leaks;
}
