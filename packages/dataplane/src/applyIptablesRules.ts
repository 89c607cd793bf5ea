import { buildIptablesReconcileDocument } from './buildIptablesReconcileDocument.ts';
import { CommandError, type CommandRunner } from './commandRunner.ts';
import { DataplaneError } from './dataplaneError.ts';
import { choosePodIptablesBackend, flavorsOf, removeIstioIptablesState } from './choosePodIptablesBackend.ts';
import type { IptablesFamily, IptablesBackend, IptablesFlavor } from './detectIptablesBackend.ts';
import { restoreIptables, xtablesRunOptions } from './iptablesExec.ts';

export { xtablesRunOptions } from './iptablesExec.ts';
import { diffIptablesState, type IptablesState, parseIptablesSave } from './iptablesState.ts';
import { type OpenScratchNetns, withScratchNetns } from './scratchNetns.ts';

export interface IptablesDeps {
  runner: CommandRunner;
  openScratchNetns: OpenScratchNetns;
  /** Canonical states by backend + document; lets repeated checks of the same plan skip the scratch netns. */
  canonicalCache?: Map<string, IptablesState>;
}

/** iptables-restore documents per family; a family without a document is left alone. */
export type IptablesDocuments = Partial<Record<IptablesFamily, string>>;

export interface ApplyIptablesRulesOptions {
  netns: string;
  backend: IptablesBackend;
  documents: IptablesDocuments;
  /** Replace differing or foreign ISTIO_* state instead of failing (never from the plugin). */
  reconcile?: boolean;
  /**
   * The netns was created for this CNI ADD, so no agent can have written to it yet: the other
   * backend is not examined (saves an exec per pod; see `choosePodIptablesBackend`).
   */
  freshNetns?: boolean;
}

export type ApplyOutcome = 'applied' | 'unchanged' | 'reconciled';

export interface ApplyIptablesResult {
  outcome: Record<IptablesFamily, ApplyOutcome | 'skipped'>;
  /** Set when the netns's ISTIO_* state lived in another backend than the node's and was reconciled there. */
  adopted?: IptablesFlavor;
  /** Backends whose second copy of the netns's ISTIO_* state was removed. */
  removedDuplicates?: IptablesFlavor[];
}

const families: readonly IptablesFamily[] = ['ipv4', 'ipv6'];

/**
 * Applies sidecar capture rules in a netns (as upstream `tools/istio-iptables`): an empty namespace gets the documents via
 * `iptables-restore --noflush`; an identical state is left untouched; a different state is an
 * error unless `reconcile`, which rewrites it in one restore per family. Every family is checked
 * before any is written, so a conflict changes nothing.
 */
export async function applyIptablesRules(deps: IptablesDeps, options: ApplyIptablesRulesOptions): Promise<ApplyIptablesResult> {
  if (options.freshNetns === true) return applyInBackend(deps, options);
  const chosen = await choosePodIptablesBackend(deps.runner, options.backend, options.netns);
  for (const duplicate of chosen.duplicates) {
    const planned: Partial<Record<IptablesFamily, IptablesState>> = {};
    for (const family of families) {
      const document = options.documents[family];
      if (document !== undefined && document.trim() !== '')
        planned[family] = await canonicalIptablesState(deps, duplicate, family, document);
    }
    await removeIstioIptablesState(deps.runner, duplicate, options.netns, planned);
  }
  const result = await applyInBackend(deps, { ...options, backend: chosen.backend });
  if (chosen.backend !== options.backend) result.adopted = chosen.backend.flavor;
  if (chosen.duplicates.length > 0) result.removedDuplicates = flavorsOf(chosen.duplicates);
  return result;
}

async function applyInBackend(deps: IptablesDeps, options: ApplyIptablesRulesOptions): Promise<ApplyIptablesResult> {
  const optimistic = await tryOptimisticRestore(deps, options);
  if (optimistic !== undefined) return optimistic;
  const plans: { family: IptablesFamily; document: string; stdin?: string; outcome: ApplyOutcome }[] = [];
  for (const family of families) {
    const document = options.documents[family];
    if (document === undefined || document.trim() === '') continue;
    const actual = await readIptablesState(deps.runner, options.backend, family, options.netns);
    if (!hasAnyRule(actual)) {
      plans.push({ family, document, stdin: document, outcome: 'applied' });
      continue;
    }
    const expected = await canonicalIptablesState(deps, options.backend, family, document);
    const diff = diffIptablesState(expected, actual);
    if (!diff.residue) {
      plans.push({ family, document, stdin: document, outcome: 'applied' });
    } else if (diff.differences.length === 0) {
      plans.push({ family, document, outcome: 'unchanged' });
    } else if (options.reconcile === true) {
      plans.push({ family, document, stdin: buildIptablesReconcileDocument(document, expected, actual), outcome: 'reconciled' });
    } else {
      throw new DataplaneError(
        'ERR_DATAPLANE_STATE_CONFLICT',
        `failed to apply ${family} sidecar rules in netns ${JSON.stringify(options.netns)}: ` +
          `it already holds different ISTIO_* state (reconcile would replace it): ${diff.differences.join('; ')}`,
      );
    }
  }
  const outcome: ApplyIptablesResult['outcome'] = { ipv4: 'skipped', ipv6: 'skipped' };
  for (const plan of plans) {
    if (plan.stdin !== undefined) await restoreIptables(deps.runner, options.backend, plan.family, options.netns, plan.stdin);
    outcome[plan.family] = plan.outcome;
  }
  return { outcome };
}

/**
 * The common case, a fresh pod netns and one family (the default REDIRECT sidecar is `*nat` only;
 * ambient is `*mangle` + `*nat`), skips the state read: `iptables-restore --noflush` refuses to
 * create a chain that exists and each table commits atomically, so a netns that already holds our
 * ISTIO_* chains makes the restore fail in the first table, nothing changes, and the checked path
 * below decides. Every table of the document must create ISTIO_* chains for that to hold. (Only a
 * netns whose ISTIO_* state was removed from some tables by hand could see the tables before the
 * failing one written; the checked path then reports the conflict.) Saves one exec per pod.
 */
async function tryOptimisticRestore(deps: IptablesDeps, options: ApplyIptablesRulesOptions): Promise<ApplyIptablesResult | undefined> {
  if (options.reconcile === true) return undefined;
  const planned = families.filter((f) => (options.documents[f] ?? '').trim() !== '');
  const family = planned[0];
  if (planned.length !== 1 || family === undefined) return undefined;
  const document = options.documents[family] as string;
  const tables = document.split(/^\*/m).slice(1);
  if (tables.length === 0 || !tables.every((table) => /^-N ISTIO/m.test(table))) return undefined;
  try {
    await restoreIptables(deps.runner, options.backend, family, options.netns, document);
  } catch (err) {
    if (err instanceof CommandError) return undefined;
    throw err;
  }
  const outcome: ApplyIptablesResult['outcome'] = { ipv4: 'skipped', ipv6: 'skipped' };
  outcome[family] = 'applied';
  return { outcome };
}

export interface VerifyIptablesRulesOptions {
  netns: string;
  backend: IptablesBackend;
  documents: IptablesDocuments;
}

/** Differences between the netns's ISTIO_* state and the documents; empty means in place (CNI CHECK). */
export async function verifyIptablesRules(deps: IptablesDeps, options: VerifyIptablesRulesOptions): Promise<string[]> {
  const chosen = await choosePodIptablesBackend(deps.runner, options.backend, options.netns);
  const differences = chosen.duplicates.map((d) => `second copy of the ISTIO_* state in iptables-${d.flavor}`);
  const backend = chosen.backend;
  for (const family of families) {
    const document = options.documents[family];
    if (document === undefined || document.trim() === '') continue;
    const actual = await readIptablesState(deps.runner, backend, family, options.netns);
    const expected = await canonicalIptablesState(deps, backend, family, document);
    differences.push(...diffIptablesState(expected, actual).differences.map((d) => `${family} ${d}`));
  }
  return differences;
}

export async function readIptablesState(
  runner: CommandRunner,
  backend: IptablesBackend,
  family: IptablesFamily,
  netns: string,
): Promise<IptablesState> {
  const { stdout } = await runner.run([backend.binaries[family].save], xtablesRunOptions(backend, netns));
  return parseIptablesSave(stdout);
}

/**
 * The plan as the kernel and this iptables print it back (`-m tcp` added, marks in hex, ...):
 * restored into a scratch netns and saved again. Comparing that with the pod's own save output is
 * exact, where re-implementing iptables' normalisation, or one `iptables -C` per rule, would not be.
 */
export async function canonicalIptablesState(
  deps: IptablesDeps,
  backend: IptablesBackend,
  family: IptablesFamily,
  document: string,
): Promise<IptablesState> {
  const key = `${backend.flavor}\0${family}\0${document}`;
  const cached = deps.canonicalCache?.get(key);
  if (cached !== undefined) return cached;
  const state = await withScratchNetns(deps.openScratchNetns, async (scratch) => {
    await restoreIptables(deps.runner, backend, family, scratch, document);
    return readIptablesState(deps.runner, backend, family, scratch);
  });
  deps.canonicalCache?.set(key, state);
  return state;
}

function hasAnyRule(state: IptablesState): boolean {
  for (const table of state.values()) for (const [chain, rules] of table) if (rules.length > 0 || chain.startsWith('ISTIO')) return true;
  return false;
}
