import {
  type AmbientConfig,
  ambientProbeSetElementScript,
  ambientProbeSetName,
  ambientProbeSetsCreateScript,
  ambientProbeSetsDestroyScript,
  ambientProbeSetsFlushScript,
} from '@istio-cni/capture';
import type { CommandRunner, RunOptions } from '../commandRunner.ts';
import { AmbientDataplaneError } from './ambientDataplaneError.ts';
import { checkPodUid, parsePodAddress } from './podAddress.ts';
import { entriesOfPod, type ProbeSetEntry, type ProbeSetManager } from './probeSets.ts';

export interface NftProbeSetsOptions {
  runner: CommandRunner;
  config: AmbientConfig;
  /** Host netns path; undefined runs in the agent's own netns. */
  netns?: string;
  nft?: string;
}

const hostTable = 'istio-ambient-nat';

/** Probe sets as nft sets in the host table `inet istio-ambient-nat` (upstream `cni/pkg/nftables`). */
export function createNftProbeSets(options: NftProbeSetsOptions): ProbeSetManager {
  const nft = options.nft ?? 'nft';
  const runOptions: RunOptions = options.netns === undefined ? {} : { netns: options.netns };
  const families: (4 | 6)[] = options.config.enableIPv6 ? [4, 6] : [4];
  const apply = (script: string, what: string) =>
    options.runner.run([nft, '-f', '-'], { ...runOptions, stdin: script }).catch((err: unknown) => {
      throw new AmbientDataplaneError('ERR_AMBIENT_PROBE_SET', `failed to ${what}: ${(err as Error).message}`, { cause: err });
    });
  const manager: ProbeSetManager = {
    async create() {
      await apply(ambientProbeSetsCreateScript(options.config), 'create nft probe sets');
    },
    async flush() {
      await apply(ambientProbeSetsCreateScript(options.config) + ambientProbeSetsFlushScript(options.config), 'flush nft probe sets');
    },
    async destroy() {
      await apply(ambientProbeSetsDestroyScript(), 'destroy nft probe sets');
    },
    async list() {
      const entries: ProbeSetEntry[] = [];
      for (const family of families) {
        const set = ambientProbeSetName(family);
        const { stdout } = await options.runner
          .run([nft, '-j', 'list', 'set', 'inet', hostTable, set], runOptions)
          .catch((err: unknown) => {
            throw new AmbientDataplaneError('ERR_AMBIENT_PROBE_SET', `failed to list nft set ${set}: ${(err as Error).message}`, {
              cause: err,
            });
          });
        entries.push(...parseNftSetJson(stdout, family));
      }
      return entries;
    },
    async addPod(uid, ips) {
      checkPodUid(uid);
      const added: string[] = [];
      let script = '';
      for (const ip of ips) {
        const add = ambientProbeSetElementScript(options.config, 'add', parsePodAddress(ip).address, uid);
        if (add === undefined) continue;
        const del = ambientProbeSetElementScript(options.config, 'delete', ip) ?? '';
        // nft keeps an existing element's comment on add: add (so delete cannot fail), delete,
        // add with the new comment, all in one transaction.
        script += add + del + add;
        added.push(parsePodAddress(ip).address);
      }
      if (script !== '') await apply(script, `add ${added.join(', ')} to the nft probe sets`);
      return added;
    },
    async removePod(uid, ips) {
      const { own, others } = entriesOfPod(await manager.list(), uid, ips);
      const removed = own.map((e) => e.ip);
      const script = removed.map((ip) => ambientProbeSetElementScript(options.config, 'delete', ip) ?? '').join('');
      if (script !== '') await apply(script, `delete ${removed.join(', ')} from the nft probe sets`);
      return { removed, keptForOtherPods: others };
    },
    async removeIp(ip) {
      const addr = parsePodAddress(ip);
      const add = ambientProbeSetElementScript(options.config, 'add', addr.address, 'prune');
      const del = ambientProbeSetElementScript(options.config, 'delete', addr.address);
      if (add === undefined || del === undefined) return;
      await apply(add + del, `delete ${addr.address} from the nft probe sets`);
    },
  };
  return manager;
}

/** Elements of `nft -j list set ...`: `"10.0.0.1"` or `{"elem": {"val": "10.0.0.1", "comment": "uid"}}`. */
export function parseNftSetJson(json: string, family: 4 | 6): ProbeSetEntry[] {
  const parsed = JSON.parse(json) as { nftables?: { set?: { elem?: unknown[] } }[] };
  const entries: ProbeSetEntry[] = [];
  for (const item of parsed.nftables ?? []) {
    for (const elem of item.set?.elem ?? []) {
      const inner = typeof elem === 'object' && elem !== null ? (elem as { elem?: { val?: unknown; comment?: unknown } }).elem : undefined;
      const val = typeof elem === 'string' ? elem : inner?.val;
      if (typeof val !== 'string') continue;
      let ip: string;
      try {
        ip = parsePodAddress(val).address;
      } catch {
        continue;
      }
      entries.push({ family, ip, ...(typeof inner?.comment === 'string' ? { uid: inner.comment } : {}) });
    }
  }
  return entries;
}
