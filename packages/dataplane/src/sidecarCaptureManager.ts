import type { CaptureEnvironment, Pod } from '@istio-cni/capture';
import { applySidecarCapture, verifySidecarCapture, type SidecarCaptureDeps } from './applySidecarCapture.ts';
import type { IptablesState } from './iptablesState.ts';
import type { CommandRunner } from './commandRunner.ts';
import { decideIptablesBackend, type IptablesBackend, type IptablesBackendDecision } from './detectIptablesBackend.ts';
import { detectPodIpv6 } from './detectPodIpv6.ts';
import { planSidecarCapture } from './planSidecarCapture.ts';
import type { PodNetnsGuard } from './podNetnsGuard.ts';
import type { OpenScratchNetns } from './scratchNetns.ts';

export interface SidecarCaptureManagerOptions {
  runner: CommandRunner;
  openScratchNetns: OpenScratchNetns;
  /** Opens and checks the pod netns before anything runs in it (never the node's own). */
  netnsGuard: PodNetnsGuard;
  nativeNftables: boolean;
  env?: CaptureEnvironment;
  /** FORCE_IPTABLES_BINARY (`legacy` | `nft`). */
  forceIptablesBinary?: string;
  /** Distinct rule plans whose canonical form is remembered (bounded: annotations vary plans). */
  cachedPlans?: number;
  /** Told once which iptables backend was chosen and why (what was found where). */
  onBackendDecision?: (decision: IptablesBackendDecision) => void;
}

export interface SidecarCaptureManager {
  /**
   * Programs the pod's capture rules in `netns`; returns the apply outcome. `podIps` (from the CNI
   * result) decide the IP family without entering the netns. `netns` is opened once and checked
   * (`PodNetnsRefusedError` for the node's netns and the like); the commands run through that fd.
   * `freshNetns`: the netns was created for this CNI ADD (not a repair of a running pod).
   */
  apply(pod: Pod, netns: string, podIps?: readonly string[], freshNetns?: boolean): Promise<string>;
  /** Differences between `netns` and the pod's expected rules; empty = in place. */
  verify(pod: Pod, netns: string): Promise<string[]>;
}

/** A Map that forgets its oldest entries beyond `limit`. */
class BoundedMap<K, V> extends Map<K, V> {
  readonly #limit: number;
  constructor(limit: number) {
    super();
    this.#limit = limit;
  }
  override set(key: K, value: V): this {
    super.set(key, value);
    while (this.size > this.#limit) {
      const oldest = this.keys().next();
      if (oldest.done) break;
      this.delete(oldest.value);
    }
    return this;
  }
}

/**
 * Sidecar capture for a long-running process (the agent) or a one-shot one (the plugin's
 * degraded mode). The iptables binaries are detected once, in the caller's network namespace
 * (upstream ambient does the same), and reused for every pod whose rules do not already live in
 * the other backend (`choosePodIptablesBackend`).
 */
export function createSidecarCaptureManager(options: SidecarCaptureManagerOptions): SidecarCaptureManager {
  const limit = options.cachedPlans ?? 64;
  const deps: SidecarCaptureDeps = {
    runner: options.runner,
    openScratchNetns: options.openScratchNetns,
    iptablesCanonicalCache: new BoundedMap<string, IptablesState>(limit),
    nftCanonicalCache: new BoundedMap<string, Map<string, string>>(limit),
  };
  let backend: Promise<IptablesBackend> | undefined;
  const iptablesBackend = (): Promise<IptablesBackend> => {
    backend ??= decideIptablesBackend(options.runner, {
      ...(options.forceIptablesBinary ? { forceBinary: options.forceIptablesBinary } : {}),
    })
      .then((decision) => {
        options.onBackendDecision?.(decision);
        return decision.backend;
      })
      .catch((err: unknown) => {
        backend = undefined; // a failed probe is retried on the next pod
        throw err;
      });
    return backend;
  };
  const plan = (pod: Pod, netns: string) =>
    planSidecarCapture(pod, {
      netns,
      nativeNftables: options.nativeNftables,
      ...(options.env ? { env: options.env } : {}),
    });

  return {
    async apply(pod, netns, podIps, freshNetns) {
      const handle = options.netnsGuard.openCniNetns(netns);
      try {
        return await handle.use(async (path) => {
          const planned = plan(pod, path);
          const extra = options.nativeNftables ? {} : { iptablesBackend: await iptablesBackend() };
          const { outcome } = await applySidecarCapture(deps, {
            ...planned,
            ...extra,
            ...(podIps ? { podIps } : {}),
            ...(freshNetns === true ? { freshNetns } : {}),
          });
          return typeof outcome === 'string'
            ? outcome
            : Object.entries(outcome)
                .map(([family, o]) => `${family}:${o}`)
                .join(',');
        });
      } finally {
        handle.close();
      }
    },
    async verify(pod, netns) {
      const planned = plan(pod, netns);
      const ipv6 = await detectPodIpv6(options.runner, netns, { dualStack: planned.dualStack === true });
      const extra = options.nativeNftables ? {} : { iptablesBackend: await iptablesBackend() };
      return verifySidecarCapture(deps, { netns, plan: planned.plan({ ipv6 }), ...extra });
    },
  };
}
