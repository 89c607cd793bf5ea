import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

/** A named network namespace (`ip netns add`), removed by `remove()`. */
export interface NamedNetns {
  name: string;
  path: string;
  /** argv prefix that runs a command inside this netns. */
  exec: string[];
  remove(): void;
}

export function uniqueName(prefix: string): string {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

export function addNetns(prefix: string): NamedNetns {
  const name = uniqueName(prefix);
  execFileSync('ip', ['netns', 'add', name]);
  execFileSync('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
  return {
    name,
    path: `/var/run/netns/${name}`,
    exec: ['ip', 'netns', 'exec', name],
    remove: () => {
      try {
        execFileSync('ip', ['netns', 'delete', name], { stdio: 'ignore' });
      } catch {
        // already gone
      }
    },
  };
}
