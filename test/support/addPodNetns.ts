import { execFileSync } from 'node:child_process';
import { uniqueName, type NamedNetns } from './netns.ts';

/** A pod netns the way the primary plugin leaves it, minus the host side: lo up and `eth0` with an IPv4 address. */
export interface PodNetns extends NamedNetns {
  /** CIDR form, for the prevResult. */
  address: string;
  gateway: string;
}

/**
 * Creates a netns holding `eth0` (one end of a veth pair whose peer stays inside) with `10.<hi>.<lo>.2/24` for `index` (0..65535), so the
 * capture code finds a pod address without any veth or bridge on the host.
 */
export function addPodNetns(prefix: string, index: number): PodNetns {
  const name = uniqueName(prefix);
  const subnet = `10.${100 + ((index >> 8) & 0x7f)}.${index & 0xff}`;
  execFileSync('ip', ['netns', 'add', name]);
  const remove = () => {
    try {
      execFileSync('ip', ['netns', 'delete', name], { stdio: 'ignore' });
    } catch {
      // already gone
    }
  };
  try {
    execFileSync('ip', ['-n', name, '-batch', '-'], {
      input: ['link set lo up', 'link add eth0 type veth peer name peer0', `addr add ${subnet}.2/24 dev eth0`, 'link set eth0 up', ''].join(
        '\n',
      ),
      stdio: ['pipe', 'ignore', 'pipe'],
    });
  } catch (err) {
    remove();
    throw err;
  }
  return {
    name,
    path: `/var/run/netns/${name}`,
    exec: ['ip', 'netns', 'exec', name],
    remove,
    address: `${subnet}.2/24`,
    gateway: `${subnet}.1`,
  };
}
