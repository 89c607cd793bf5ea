import { errorMessage } from '@istio-cni/cni';
import { type CommandRunner, decideIptablesBackend, type IptablesBackend, removeIstioIptablesState } from '@istio-cni/dataplane';
import type { Logger } from '@istio-cni/handoff';

/**
 * The node's iptables backend, decided once in the host netns and logged with what was found where.
 * ISTIO_* state of another agent (e.g. upstream's ISTIO_POSTRT) in the other backend is removed,
 * so the host rules are never stacked on top of it.
 */
export async function decideNodeIptables(
  runner: CommandRunner,
  hostNetns: string | undefined,
  force: string | undefined,
  log: Logger,
): Promise<IptablesBackend> {
  const decision = await decideIptablesBackend(runner, {
    ...(force ? { forceBinary: force } : {}),
    ...(hostNetns ? { netns: hostNetns } : {}),
  });
  log.info('iptables backend', { backend: decision.backend.flavor, reason: decision.reason });
  for (const leftover of decision.leftovers) {
    try {
      await removeIstioIptablesState(runner, leftover, hostNetns ?? '/proc/self/ns/net');
      log.warn(`removed the ISTIO_* host rules another agent left in iptables-${leftover.flavor}`);
    } catch (err) {
      log.error(`failed to remove the ISTIO_* host rules another agent left in iptables-${leftover.flavor}`, { error: errorMessage(err) });
    }
  }
  return decision.backend;
}
