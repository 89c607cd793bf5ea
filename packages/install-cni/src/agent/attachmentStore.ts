import { existsSync, readFileSync } from 'node:fs';
import { errorMessage } from '@istio-cni/cni';
import type { Logger } from '@istio-cni/handoff';
import { atomicWrite } from '../installer/atomicWrite.ts';
import type { VerifiableAttachment } from './podVerifier.ts';

/** In the run dir: the attachments the agent handled, so verification covers them across a restart (an upgrade). */
export const ATTACHMENTS_FILE = 'attachments.json';

const modes = new Set(['sidecar', 'ambient', 'none']);

function isAttachment(v: unknown): v is VerifiableAttachment {
  if (typeof v !== 'object' || v === null) return false;
  const a = v as Record<string, unknown>;
  return (
    ['namespace', 'name', 'uid', 'netns'].every((k) => typeof a[k] === 'string' && a[k] !== '') &&
    typeof a.mode === 'string' &&
    modes.has(a.mode)
  );
}

/**
 * The attachments saved by an earlier run whose netns still exists (`exists` checks the CNI netns
 * path); anything unreadable is ignored, as if nothing had been saved.
 */
export function loadAttachments(path: string, exists: (netns: string) => boolean = existsSync): Map<string, VerifiableAttachment> {
  const out = new Map<string, VerifiableAttachment>();
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return out;
  }
  if (typeof parsed !== 'object' || parsed === null) return out;
  for (const [key, value] of Object.entries(parsed as Record<string, unknown>)) {
    if (isAttachment(value) && exists(value.netns)) {
      const ips = Array.isArray(value.ips) ? value.ips.filter((ip): ip is string => typeof ip === 'string') : [];
      const inode = value.netnsInode;
      out.set(key, {
        namespace: value.namespace,
        name: value.name,
        uid: value.uid,
        netns: value.netns,
        mode: value.mode,
        ...(ips.length > 0 ? { ips } : {}),
        ...(Number.isSafeInteger(inode) && (inode as number) > 0 ? { netnsInode: inode as number } : {}),
      });
    }
  }
  return out;
}

/** Writes the attachments (0600, atomically) at most once per `delayMs` after a change. */
export function createAttachmentSaver(
  path: string,
  current: () => ReadonlyMap<string, VerifiableAttachment>,
  logger: Logger,
  delayMs = 1000,
): { changed(): void; flush(): Promise<void> } {
  let timer: NodeJS.Timeout | undefined;
  let writing: Promise<void> = Promise.resolve();
  const save = (): Promise<void> => {
    timer = undefined;
    const text = JSON.stringify(Object.fromEntries(current()));
    writing = writing
      .then(() => atomicWrite(path, text, 0o600))
      .catch((err: unknown) => logger.warn('failed to save the tracked attachments', { path, error: errorMessage(err) }));
    return writing;
  };
  return {
    changed() {
      if (timer !== undefined) return;
      timer = setTimeout(save, delayMs);
      timer.unref();
    },
    flush() {
      if (timer === undefined) return writing;
      clearTimeout(timer);
      return save();
    },
  };
}
