/**
 * The plugin kubeconfig in exactly the form the installer writes it (install-cni
 * `installer/kubeconfig.ts`, after upstream `cni/pkg/install/kubeconfig.go`: keys sorted, list items
 * at the parent's indentation, one value per line), read without a YAML parser. Degraded mode
 * reads this file on every ADD while the agent is down, and loading plus running the general
 * parser cost more than everything else it does before the API request.
 *
 * Only text this reader fully understands is accepted, each value a plain scalar that YAML would
 * also read as that same string; anything else, even equivalent YAML (other key order, quoting,
 * comments, flow style), gives `undefined` and the caller uses the general parser. So for any
 * input the document is the one YAML would give, or this reader is not used.
 */

/** One line of the format; `value` marks where a plain scalar follows the prefix. */
type Line = { text: string } | { prefix: string; value: string };

const HEAD: Line[] = [{ text: 'apiVersion: v1' }, { text: 'clusters:' }, { text: '- cluster:' }];
const TAIL: Line[] = [
  { prefix: '    server: ', value: 'server' },
  { prefix: '  name: ', value: 'clusterName' },
  { text: 'contexts:' },
  { text: '- context:' },
  { prefix: '    cluster: ', value: 'contextCluster' },
  { prefix: '    user: ', value: 'contextUser' },
  { prefix: '  name: ', value: 'contextName' },
  { prefix: 'current-context: ', value: 'currentContext' },
  { text: 'kind: Config' },
  { text: 'users:' },
  { prefix: '- name: ', value: 'userName' },
  { text: '  user:' },
  { prefix: '    token: ', value: 'token' },
];
const WITH_CA: Line[] = [...HEAD, { prefix: '    certificate-authority-data: ', value: 'caData' }, ...TAIL];
const SKIP_TLS_VERIFY: Line[] = [...HEAD, { text: '    insecure-skip-tls-verify: true' }, ...TAIL];

/**
 * A plain scalar that YAML's core schema resolves to this same string: it starts with a letter (so
 * no number, `.inf` or `.nan`, no indicator), holds no space, quote, `#` or other character with a
 * meaning in YAML, does not end in `:` and is not a null or boolean word.
 */
const PLAIN_STRING = /^[A-Za-z][\w+/=.:~%@[\]-]*$/;
const NOT_STRINGS = new Set(['null', 'Null', 'NULL', 'true', 'True', 'TRUE', 'false', 'False', 'FALSE']);

function plainString(s: string): boolean {
  return PLAIN_STRING.test(s) && !s.endsWith(':') && !NOT_STRINGS.has(s);
}

function match(lines: string[], format: Line[]): Record<string, string> | undefined {
  if (lines.length !== format.length) return undefined;
  const values: Record<string, string> = {};
  for (let i = 0; i < format.length; i++) {
    const want = format[i] as Line;
    const line = lines[i] as string;
    if ('text' in want) {
      if (line !== want.text) return undefined;
      continue;
    }
    if (!line.startsWith(want.prefix)) return undefined;
    const value = line.slice(want.prefix.length);
    if (!plainString(value)) return undefined;
    values[want.value] = value;
  }
  return values;
}

/** The document of an installer-written kubeconfig, as YAML would parse it; `undefined` for any other text. */
export function parseInstallerKubeconfig(text: string): Record<string, unknown> | undefined {
  const lines = (text.endsWith('\n') ? text.slice(0, -1) : text).split('\n');
  const withCa = match(lines, WITH_CA);
  const v = withCa ?? match(lines, SKIP_TLS_VERIFY);
  if (v === undefined) return undefined;
  const cluster: Record<string, unknown> = withCa ? { 'certificate-authority-data': v.caData } : { 'insecure-skip-tls-verify': true };
  cluster.server = v.server;
  return {
    apiVersion: 'v1',
    clusters: [{ cluster, name: v.clusterName }],
    contexts: [{ context: { cluster: v.contextCluster, user: v.contextUser }, name: v.contextName }],
    'current-context': v.currentContext,
    kind: 'Config',
    users: [{ name: v.userName, user: { token: v.token } }],
  };
}
