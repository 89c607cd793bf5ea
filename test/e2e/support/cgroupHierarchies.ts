import { readFileSync } from 'node:fs';

/** The mounted cgroup hierarchies (v1 controllers, v1 named, the hybrid unified one, or the one v2 tree). */
export function cgroupHierarchies(): string[] {
  const hierarchies: string[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [mountFields, superFields] = line.split(' - ');
    const fsType = superFields?.split(' ')[0];
    const mountPoint = mountFields?.split(' ')[4];
    const underSysFs = mountPoint === '/sys/fs/cgroup' || mountPoint?.startsWith('/sys/fs/cgroup/') === true;
    if ((fsType === 'cgroup' || fsType === 'cgroup2') && underSysFs && mountPoint !== undefined) hierarchies.push(mountPoint);
  }
  return hierarchies;
}
