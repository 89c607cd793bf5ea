import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, isAbsolute } from 'node:path';

// A local cluster's host-wide names (the node bridge, the nodes' netns, veths and cgroups) exist once
// per machine, whichever checkout runs `make up`. The claim file names the cluster directory that
// holds them, so that the next `make up` can tell a cluster still running (refused, named) from one
// whose processes were killed without `make down` (a machine or container restart, a cancelled CI
// job): that one is torn down from its own record before the names are used again.

/** What the claim needs to know about the cluster directory that holds it. */
export interface ClaimHolder {
  /** A running process of the cluster in `dir`, named ("kube-apiserver, pid 42"), or undefined when none runs. */
  liveProcess(dir: string): string | undefined;
  /** Removes what the cluster in `dir` left (releasing its claim); returns what could not be removed. */
  tearDown(dir: string): Promise<string[]>;
}

/** The cluster directory a claim file names, or undefined when there is none or it is not one. */
export function readClaim(claimFile: string): string | undefined {
  let text: string;
  try {
    text = readFileSync(claimFile, 'utf8');
  } catch {
    return undefined;
  }
  try {
    const parsed: unknown = JSON.parse(text);
    if (typeof parsed !== 'object' || parsed === null) return undefined;
    const dir: unknown = (parsed as Record<string, unknown>).clusterDir;
    if (typeof dir !== 'string' || !isAbsolute(dir) || dir.includes('\0') || /[\r\n]/.test(dir)) return undefined;
    return dir;
  } catch {
    return undefined;
  }
}

/**
 * Claims the machine's cluster names for `clusterDir`. A claim held by a running cluster is refused
 * with the command that frees it; a dead holder's leftovers are removed first (its tearDown); an
 * unreadable claim is replaced.
 */
export async function claimHost(claimFile: string, clusterDir: string, holders: ClaimHolder, log: (line: string) => void): Promise<void> {
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      writeFileSync(claimFile, `${JSON.stringify({ clusterDir })}\n`, { flag: 'wx', mode: 0o644 });
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = readClaim(claimFile);
    if (holder === undefined) {
      log(`${claimFile} names no cluster directory: replacing it`);
    } else {
      const live = holders.liveProcess(holder);
      if (live !== undefined) {
        throw new Error(
          `this machine's cluster network belongs to the cluster in ${holder}, which still runs (${live}): run \`make down\` in ${dirname(holder)} first`,
        );
      }
      log(`the cluster in ${holder} was never taken down and none of its processes runs: removing what it left`);
      const problems = await holders.tearDown(holder);
      if (problems.length > 0) {
        throw new Error(`could not remove what the cluster in ${holder} left:\n  ${problems.join('\n  ')}`);
      }
    }
    // Released by the tearDown, or never a claim: removed only if it still reads the same.
    if (readClaim(claimFile) === holder) rmSync(claimFile, { force: true });
  }
  throw new Error(`${claimFile}: another \`make up\` claims this machine at the same time`);
}

/** Drops the claim when `clusterDir` holds it. */
export function releaseHost(claimFile: string, clusterDir: string): void {
  if (readClaim(claimFile) === clusterDir) rmSync(claimFile, { force: true });
}
