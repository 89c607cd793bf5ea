import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readlinkSync, writeFileSync } from 'node:fs';
import type { TestContext } from 'node:test';

export interface NetnsEnd {
  name: string;
  path: string;
  ipv4: string;
  ipv6: string;
}

/**
 * A "node" netns and a "pod" netns joined by a veth pair, both with lo up:
 * node 10.99.0.1/24 + fd00:99::1/64, pod 10.99.0.2/24 + fd00:99::2/64. The node also owns
 * `farIpv4`/`farIpv6` (10.98.0.1, fd00:98::1), routed from the pod through the veth, to test
 * excluded CIDRs. Nothing routes anywhere else, so test traffic never leaves the pair.
 */
export interface PodNetworkFixture {
  node: NetnsEnd;
  pod: NetnsEnd;
  farIpv4: string;
  farIpv6: string;
}

function ip(...args: string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

export interface PodNetworkFixtureOptions {
  /**
   * The pod netns belongs to a user namespace of its own, mapping the pod's ids 0..65535 to host ids
   * from this base, as the runtime does for a pod with `hostUsers: false`: the pod's uid u is host
   * uid base + u.
   */
  podUsernsBase?: number;
}

/** Creates the pair; `t.after` removes both namespaces (and with them the veth), even on failure. */
export function createPodNetworkFixture(t: TestContext, options: PodNetworkFixtureOptions = {}): PodNetworkFixture {
  const id = randomBytes(4).toString('hex');
  const node = { name: `dpnode-${id}`, path: `/var/run/netns/dpnode-${id}`, ipv4: '10.99.0.1', ipv6: 'fd00:99::1' };
  const pod = { name: `dppod-${id}`, path: `/var/run/netns/dppod-${id}`, ipv4: '10.99.0.2', ipv6: 'fd00:99::2' };
  const created: string[] = [];
  t.after(() => {
    for (const name of created) {
      try {
        execFileSync('ip', ['netns', 'delete', name], { stdio: 'ignore' });
      } catch {
        // already gone
      }
    }
  });
  for (const ns of [node, pod]) {
    created.push(ns.name);
    if (ns === pod && options.podUsernsBase !== undefined) addUsernsOwnedNetns(ns.path, options.podUsernsBase);
    else ip('netns', 'add', ns.name);
    ip('-n', ns.name, 'link', 'set', 'lo', 'up');
  }
  const [vn, vp] = [`dpn${id}`, `dpp${id}`];
  ip('link', 'add', vn, 'netns', node.name, 'type', 'veth', 'peer', 'name', vp, 'netns', pod.name);
  ip('-n', node.name, 'addr', 'add', `${node.ipv4}/24`, 'dev', vn);
  ip('-n', node.name, 'addr', 'add', '10.98.0.1/32', 'dev', vn);
  ip('-n', node.name, '-6', 'addr', 'add', `${node.ipv6}/64`, 'dev', vn, 'nodad');
  ip('-n', node.name, '-6', 'addr', 'add', 'fd00:98::1/128', 'dev', vn, 'nodad');
  ip('-n', pod.name, 'addr', 'add', `${pod.ipv4}/24`, 'dev', vp);
  ip('-n', pod.name, '-6', 'addr', 'add', `${pod.ipv6}/64`, 'dev', vp, 'nodad');
  ip('-n', node.name, 'link', 'set', vn, 'up');
  ip('-n', pod.name, 'link', 'set', vp, 'up');
  ip('-n', pod.name, 'route', 'add', '10.98.0.0/24', 'via', node.ipv4);
  ip('-n', pod.name, '-6', 'route', 'add', 'fd00:98::/64', 'via', node.ipv6);
  return { node, pod, farIpv4: '10.98.0.1', farIpv6: 'fd00:98::1' };
}

/**
 * A netns owned by a new user namespace, bound at `path` like `ip netns add` (so `ip netns delete`
 * removes it): created by a holder process that exits once the bind mount keeps the netns alive.
 * The directory of `path` must exist (the node netns is added first).
 */
function addUsernsOwnedNetns(path: string, hostIdBase: number): void {
  const holder = spawn('unshare', ['--user', '--net', '--', 'sleep', 'infinity'], { stdio: 'ignore' });
  try {
    const pid = holder.pid;
    if (pid === undefined) throw new Error('unshare did not start');
    const own = readlinkSync('/proc/self/ns/user');
    const deadline = Date.now() + 5_000;
    while (readlinkSync(`/proc/${pid}/ns/user`) === own) {
      if (Date.now() > deadline) throw new Error('unshare did not enter a new user namespace within 5 s');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
    }
    writeFileSync(`/proc/${pid}/uid_map`, `0 ${hostIdBase} 65536\n`);
    writeFileSync(`/proc/${pid}/gid_map`, `0 ${hostIdBase} 65536\n`);
    writeFileSync(path, '', { mode: 0o444, flag: 'wx' });
    execFileSync('mount', ['--bind', `/proc/${pid}/ns/net`, path], { stdio: ['ignore', 'ignore', 'pipe'] });
  } finally {
    holder.kill('SIGKILL');
  }
}
