import type { CommandRunner } from './commandRunner.ts';

export interface TproxyRouteOptions {
  netns: string;
  ipv6: boolean;
  /** Add the `fwmark → local table` policy routes (TPROXY with inbound capture). */
  tproxy: boolean;
  mark?: number;
  table?: number;
  ip?: string;
}

/**
 * Upstream `tproxy/run_linux.go`: `::6/128` on lo for IPv6 pods (the inbound-passthrough source), and for TPROXY
 * `ip rule fwmark <mark> lookup <table>` + `ip route add local default dev lo table <table>` per
 * family. Idempotent: `ip rule add` happily adds duplicates, so existing rules are looked up first;
 * the address and the route use `replace`, which (unlike upstream's add-and-ignore-"exists") needs
 * no matching of error text that differs between kernels ("File exists" vs "address already
 * assigned").
 */
export async function configureTproxyRoutes(runner: CommandRunner, options: TproxyRouteOptions): Promise<void> {
  const ip = options.ip ?? 'ip';
  const netns = options.netns;
  if (options.ipv6) await runner.run([ip, '-6', 'addr', 'replace', '::6/128', 'dev', 'lo'], { netns });
  if (!options.tproxy) return;
  const mark = String(options.mark ?? 1337);
  const table = String(options.table ?? 133);
  for (const family of options.ipv6 ? ['-4', '-6'] : ['-4']) {
    const { stdout } = await runner.run([ip, family, 'rule', 'list', 'fwmark', mark, 'lookup', table], { netns });
    if (stdout.trim() === '') await runner.run([ip, family, 'rule', 'add', 'fwmark', mark, 'lookup', table], { netns });
    await runner.run([ip, family, 'route', 'replace', 'local', 'default', 'dev', 'lo', 'table', table], { netns });
  }
}
