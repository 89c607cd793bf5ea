// `install-cni doctor -o json` against the schema docs/architecture.md ("install-cni doctor")
// documents: every documented field present with its documented type. Extra fields are allowed
// (the schema only ever adds them). Returns one line per mismatch, empty when the report conforms.

type Check = (value: unknown, path: string, problems: string[]) => void;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const type =
  (expected: 'string' | 'number' | 'boolean'): Check =>
  (v, path, problems) => {
    if (typeof v !== expected) problems.push(`${path}: expected ${expected}, got ${JSON.stringify(v)}`);
  };
const oneOf =
  (...allowed: readonly unknown[]): Check =>
  (v, path, problems) => {
    if (!allowed.includes(v))
      problems.push(`${path}: expected one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}, got ${JSON.stringify(v)}`);
  };
const nullable =
  (check: Check): Check =>
  (v, path, problems) => {
    if (v !== null) check(v, path, problems);
  };
const optional =
  (check: Check): Check =>
  (v, path, problems) => {
    if (v !== undefined) check(v, path, problems);
  };
const timestamp: Check = (v, path, problems) => {
  if (typeof v !== 'string' || Number.isNaN(Date.parse(v))) problems.push(`${path}: expected an RFC 3339 time, got ${JSON.stringify(v)}`);
};
const arrayOf =
  (check: Check): Check =>
  (v, path, problems) => {
    if (!Array.isArray(v)) {
      problems.push(`${path}: expected an array, got ${JSON.stringify(v)}`);
      return;
    }
    for (const [i, item] of v.entries()) check(item, `${path}[${i}]`, problems);
  };
const object =
  (fields: Record<string, Check>): Check =>
  (v, path, problems) => {
    if (!isObject(v)) {
      problems.push(`${path}: expected an object, got ${JSON.stringify(v)}`);
      return;
    }
    for (const [key, check] of Object.entries(fields)) check(v[key], `${path}.${key}`, problems);
  };

const STATUS = ['ok', 'drift', 'skipped', 'unverifiable'] as const;
const drift = object({ kind: type('string'), detail: type('string') });
const lastVerification = nullable(
  object({
    at: timestamp,
    status: oneOf(...STATUS),
    action: optional(oneOf('repaired', 'failed', 'reported')),
    error: optional(type('string')),
  }),
);
const pod = object({
  pod: type('string'),
  mode: oneOf('sidecar', 'ambient', 'none'),
  status: oneOf(...STATUS),
  reason: optional(type('string')),
  drift: arrayOf(drift),
  lastVerification,
});
const nodeState = object({ status: oneOf(...STATUS), reason: optional(type('string')), drift: arrayOf(drift), lastVerification });
const node = object({
  binaries: arrayOf(
    object({ dir: type('string'), present: type('boolean'), identical: type('boolean'), problem: optional(type('string')) }),
  ),
  cniConfig: object({
    file: nullable(type('string')),
    primary: type('boolean'),
    position: nullable(type('number')),
    plugins: nullable(type('number')),
    problem: optional(type('string')),
  }),
  kubeconfig: object({ path: type('string'), present: type('boolean') }),
});
const reachableDaemon = object({
  reachable: oneOf(true),
  backend: oneOf('iptables-nft', 'iptables-legacy', 'nft'),
  installer: object({
    ready: type('boolean'),
    passes: type('number'),
    lastPassAt: nullable(timestamp),
    lastError: nullable(type('string')),
  }),
  ambient: object({ enabled: type('boolean'), ztunnelConnections: nullable(type('number')), hostRules: optional(nodeState) }),
  verification: object({ intervalSeconds: type('number'), reportOnly: type('boolean') }),
  agent: type('boolean'),
  pods: arrayOf(pod),
});
const daemon: Check = (v, path, problems) => {
  if (isObject(v) && v.reachable === false) type('string')(v.error, `${path}.error`, problems);
  else reachableDaemon(v, path, problems);
};
const report = object({ schemaVersion: oneOf(1), ok: type('boolean'), node, daemon, problems: arrayOf(type('string')) });

export function doctorSchemaProblems(value: unknown): string[] {
  const problems: string[] = [];
  report(value, '$', problems);
  if (isObject(value) && value.ok === true && Array.isArray(value.problems) && value.problems.length > 0) {
    problems.push('$.problems: not empty although ok is true');
  }
  return problems;
}
