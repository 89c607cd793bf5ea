import {
  createExecCommandRunner,
  createNetnsOwnerOpener,
  createPodNetnsGuard,
  createScratchNetnsOpener,
  createSidecarCaptureManager,
  type SidecarCaptureManager,
} from '@istio-cni/dataplane/sidecar';
import { captureEnvironmentFrom } from '@istio-cni/capture';
import type { PluginConfig } from '@istio-cni/handoff';
import { bunNsIoctl } from './bunNsIoctl.ts';

/** The agent's sidecar capture code, set up for the plugin; loaded only for a pod that needs it. */
export function pluginSidecarCapture(config: PluginConfig): SidecarCaptureManager {
  // The installer's copy of the daemon's setting wins; the runtime's environment is the fallback.
  const forceIptablesBinary = config.forceIptablesBinary || process.env.FORCE_IPTABLES_BINARY;
  return createSidecarCaptureManager({
    // A `hostUsers: false` pod's iptables rules are written from its own user namespace, as the agent's.
    runner: createExecCommandRunner({ netnsOwner: createNetnsOwnerOpener(bunNsIoctl) }),
    openScratchNetns: createScratchNetnsOpener(),
    // The plugin runs on the host: its /proc is the host's.
    netnsGuard: createPodNetnsGuard({ hostProcDir: '/proc' }),
    nativeNftables: config.nativeNftables,
    env: captureEnvironmentFrom(process.env),
    ...(forceIptablesBinary ? { forceIptablesBinary } : {}),
  });
}
