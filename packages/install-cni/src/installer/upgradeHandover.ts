import { rm } from 'node:fs/promises';
import { UPGRADE_HANDOVER, runDirPath } from '@istio-cni/handoff';
import { atomicWrite } from './atomicWrite.ts';

/**
 * The hand-over file an agent stopping for an upgrade leaves in the run dir (docs/architecture.md
 * "Degraded mode", STATUS): its age tells the plugin's STATUS that a successor is on the way. The
 * run dir is a tmpfs, so a reboot never finds one.
 */
export async function writeUpgradeHandover(runDir: string, now: Date = new Date()): Promise<void> {
  await atomicWrite(runDirPath(runDir, UPGRADE_HANDOVER), `${JSON.stringify({ since: now.toISOString() })}\n`, 0o600);
}

/** Removed by the successor once ready, and by a clean-up. */
export async function removeUpgradeHandover(runDir: string): Promise<void> {
  await rm(runDirPath(runDir, UPGRADE_HANDOVER), { force: true });
}
