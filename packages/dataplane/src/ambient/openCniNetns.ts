import { join } from 'node:path';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import { type NetnsHandle, openNetnsHandle } from './netnsHandle.ts';

/**
 * As upstream `cni-watcher.go`: the netns path the runtime gave the plugin (`/var/run/netns/cni-<id>`,
 * `/proc/<pid>/ns/net`) is a host path; the agent sees the host under `hostRoot` (`/host` in its
 * container, `/` when it runs on the host). The caller owns the returned handle.
 */
export function openCniNetns(netnsPath: string, options: { hostRoot?: string } = {}): NetnsHandle {
  if (typeof netnsPath !== 'string' || !netnsPath.startsWith('/') || netnsPath.split('/').includes('..') || netnsPath.includes('\0')) {
    throw new AmbientDataplaneError('ERR_AMBIENT_INVALID_ARGUMENT', `invalid netns path ${JSON.stringify(String(netnsPath))}: must be an absolute path without ".."`);
  }
  return openNetnsHandle(join(options.hostRoot ?? '/', netnsPath));
}
