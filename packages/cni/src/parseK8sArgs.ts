import { CniError } from './cniError.ts';
import { ErrorCode } from './errorCode.ts';
import { goQuote, goQuoteList } from './goText.ts';

/** The Kubernetes keys container runtimes put in CNI_ARGS. */
export interface K8sArgs {
  podName: string;
  podNamespace: string;
  podInfraContainerId: string;
  podUid: string;
}

const K8S_KEYS: Record<string, keyof K8sArgs> = {
  K8S_POD_NAME: 'podName',
  K8S_POD_NAMESPACE: 'podNamespace',
  K8S_POD_INFRA_CONTAINER_ID: 'podInfraContainerId',
  K8S_POD_UID: 'podUid',
};

function argsError(msg: string): never {
  // The reference library returns a plain error here, which its skel reports as 999.
  throw new CniError(ErrorCode.Internal, msg);
}

/**
 * Parses `CNI_ARGS` (`K=V;K2=V2`) like `types.LoadArgs` into a struct that
 * embeds `types.CommonArgs`: keys match exactly, later duplicates win, a pair
 * without exactly one `=` is an error, and unknown keys are an error unless
 * `IgnoreUnknown` is set to a true value (`1`/`true`, any case) anywhere in the list.
 * Missing keys are ''.
 */
export function parseK8sArgs(cniArgs: string): K8sArgs {
  const out: K8sArgs = { podName: '', podNamespace: '', podInfraContainerId: '', podUid: '' };
  if (cniArgs === '') return out;
  let ignoreUnknown = false;
  const unknown: string[] = [];
  for (const pair of cniArgs.split(';')) {
    const kv = pair.split('=');
    if (kv.length !== 2) argsError(`ARGS: invalid pair ${goQuote(pair)}`);
    const [key = '', value = ''] = kv;
    const field = Object.hasOwn(K8S_KEYS, key) ? K8S_KEYS[key] : undefined;
    if (field !== undefined) {
      out[field] = value;
    } else if (key === 'IgnoreUnknown') {
      const lower = value.toLowerCase();
      if (lower === '1' || lower === 'true') ignoreUnknown = true;
      else if (lower === '0' || lower === 'false') ignoreUnknown = false;
      else argsError(`ARGS: error parsing value of pair ${goQuote(pair)}: Boolean unmarshal error: invalid input ${lower})`);
    } else if (key === 'CommonArgs') {
      // Go's reflection finds the embedded struct itself under this name.
      argsError(`ARGS: cannot unmarshal into field 'CommonArgs' - type '*types.CommonArgs' does not implement encoding.TextUnmarshaler`);
    } else {
      unknown.push(pair);
    }
  }
  if (unknown.length > 0 && !ignoreUnknown) argsError(`ARGS: unknown args ${goQuoteList(unknown)}`);
  return out;
}
