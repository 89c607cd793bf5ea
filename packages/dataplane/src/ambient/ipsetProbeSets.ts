import { type AmbientConfig, ambientProbeSetName } from '@istio-cni/capture';
import type { CommandRunner, RunOptions } from '../commandRunner.ts';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import { checkPodUid, parsePodAddress } from './podAddress.ts';
import { entriesOfPod, type ProbeSetEntry, type ProbeSetManager } from './probeSets.ts';

export interface IpsetProbeSetsOptions {
  runner: CommandRunner;
  config: AmbientConfig;
  /** Host netns path; undefined runs in the agent's own netns. */
  netns?: string;
  /** Path or name of ipset(8). */
  ipset?: string;
}

const missingSet = /does not exist/;

/** Probe sets as kernel ipsets (`hash:ip` with comments), driven through the `ipset` command. */
export function createIpsetProbeSets(options: IpsetProbeSetsOptions): ProbeSetManager {
  const ipset = options.ipset ?? 'ipset';
  const runOptions: RunOptions = options.netns === undefined ? {} : { netns: options.netns };
  const families: (4 | 6)[] = options.config.enableIPv6 ? [4, 6] : [4];
  const run = (args: string[]) => options.runner.run([ipset, ...args], runOptions);
  const fail = (what: string, err: unknown): never => {
    throw new AmbientDataplaneError('ERR_AMBIENT_PROBE_SET', `failed to ${what}: ${(err as Error).message}`, { cause: err });
  };
  const ignoreMissing = (err: unknown): void => {
    if (!missingSet.test(String((err as { stderr?: unknown }).stderr ?? ''))) throw err;
  };

  const manager: ProbeSetManager = {
    async create() {
      for (const family of families) {
        const set = ambientProbeSetName(family);
        await run(['create', set, 'hash:ip', 'comment', 'family', family === 4 ? 'inet' : 'inet6', '-exist']).catch((err) =>
          fail(`create ipset ${set}`, err),
        );
      }
    },
    async flush() {
      for (const family of families) {
        const set = ambientProbeSetName(family);
        await run(['flush', set])
          .catch(ignoreMissing)
          .catch((err) => fail(`flush ipset ${set}`, err));
      }
    },
    async destroy() {
      for (const family of [4, 6] as const) {
        const set = ambientProbeSetName(family);
        await run(['destroy', set])
          .catch(ignoreMissing)
          .catch((err) => fail(`destroy ipset ${set}`, err));
      }
    },
    async list() {
      const entries: ProbeSetEntry[] = [];
      for (const family of families) {
        const set = ambientProbeSetName(family);
        const { stdout } = await run(['save', set]).catch((err) => fail(`list ipset ${set}`, err));
        entries.push(...parseIpsetSave(stdout, set, family));
      }
      return entries;
    },
    async addPod(uid, ips) {
      checkPodUid(uid);
      const added: string[] = [];
      const errors: string[] = [];
      for (const ip of ips) {
        const addr = parsePodAddress(ip);
        if (addr.family === 6 && !options.config.enableIPv6) continue;
        const set = ambientProbeSetName(addr.family);
        // -exist turns add into an upsert that also rewrites the comment.
        await run(['add', set, addr.address, 'comment', uid, '-exist']).then(
          () => added.push(addr.address),
          (err: unknown) => errors.push(`add ${addr.address} to ipset ${set}: ${(err as Error).message}`),
        );
      }
      if (errors.length > 0) throw new AmbientDataplaneError('ERR_AMBIENT_PROBE_SET', `failed to ${errors.join('; ')}`);
      return added;
    },
    async removePod(uid, ips) {
      const { own, others } = entriesOfPod(await manager.list(), uid, ips);
      for (const entry of own) await manager.removeIp(entry.ip);
      return { removed: own.map((e) => e.ip), keptForOtherPods: others };
    },
    async removeIp(ip) {
      const addr = parsePodAddress(ip);
      const set = ambientProbeSetName(addr.family);
      await run(['del', set, addr.address, '-exist']).catch((err) => fail(`delete ${addr.address} from ipset ${set}`, err));
    },
  };
  return manager;
}

/** `add <set> <ip> [comment "<text>"] ...` lines of `ipset save <set>`. */
export function parseIpsetSave(text: string, set: string, family: 4 | 6): ProbeSetEntry[] {
  const entries: ProbeSetEntry[] = [];
  for (const line of text.split('\n')) {
    const m = /^add (\S+) (\S+)(.*)$/.exec(line.trim());
    if (m === null || m[1] !== set) continue;
    const comment = /\bcomment "((?:[^"\\]|\\.)*)"/.exec(m[3] ?? '');
    let ip: string;
    try {
      ip = parsePodAddress(m[2] ?? '').address;
    } catch {
      continue;
    }
    entries.push({ family, ip, ...(comment === null ? {} : { uid: comment[1] ?? '' }) });
  }
  return entries;
}
