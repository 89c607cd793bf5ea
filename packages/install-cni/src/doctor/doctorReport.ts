/**
 * `install-cni doctor -o json`: a stable schema (docs/architecture.md, "Verification"). Fields are
 * only ever added; `schemaVersion` changes if one is removed or changes meaning.
 */
export const DOCTOR_SCHEMA_VERSION = 1;

/** `POST` on the daemon's hand-off socket (`<run dir>/pluginevent.sock`, mode 0600), body `{"pod"?: "ns/name"}`. */
export const DOCTOR_PATH = '/v1/doctor';

export interface DoctorDrift {
  kind: string;
  detail: string;
}

/** One plugin binary target directory. */
export interface BinaryCheck {
  dir: string;
  present: boolean;
  /** Same bytes as the image's copy (`CNI_BIN_SOURCE_DIR/istio-cni`). */
  identical: boolean;
  problem?: string;
}

export interface CniConfigCheck {
  /** The file whose plugin list names `istio-cni`; `null` when none does. */
  file: string | null;
  /** The runtime loads the lexically first config file: this is it. */
  primary: boolean;
  /** 1-based place of `istio-cni` in the chain, and the chain's length. */
  position: number | null;
  plugins: number | null;
  problem?: string;
}

export interface NodeChecks {
  binaries: BinaryCheck[];
  cniConfig: CniConfigCheck;
  kubeconfig: { path: string; present: boolean };
}

/** One pod as the daemon sees it now (checked at the time of the request, nothing repaired). */
export interface DoctorPod {
  pod: string;
  /** `sidecar`, `ambient` or `none` (outside the mesh). */
  mode: string;
  /** Result of the check made for this request: `ok`, `drift`, `skipped`, `unverifiable`. */
  status: string;
  /** Why skipped or unverifiable. */
  reason?: string;
  drift: DoctorDrift[];
  /** The last periodic verification, if any. */
  lastVerification: { at: string; status: string; action?: string; error?: string } | null;
}

/** A piece of the node's own state checked like a pod (ambient's host probe rules). */
export interface DoctorNodeState {
  status: string;
  reason?: string;
  drift: DoctorDrift[];
  lastVerification: DoctorPod['lastVerification'];
}

export interface DaemonState {
  /** `iptables-legacy`, `iptables-nft` or `nft`, as configured (FORCE_IPTABLES_BINARY / NATIVE_NFTABLES) or detected. */
  backend: string;
  installer: { ready: boolean; passes: number; lastPassAt: string | null; lastError: string | null };
  /** `hostRules`: the node's host probe rules (SNAT of kubelet's probes), once ambient is ready. */
  ambient: { enabled: boolean; ztunnelConnections: number | null; hostRules?: DoctorNodeState };
  verification: { intervalSeconds: number; reportOnly: boolean };
  /** `false` when the daemon has no Kubernetes API access (then it knows no pods). */
  agent: boolean;
  pods: DoctorPod[];
}

export interface DoctorReport {
  schemaVersion: number;
  /** Everything agrees: exit 0. */
  ok: boolean;
  node: NodeChecks;
  daemon: ({ reachable: true } & DaemonState) | { reachable: false; error: string };
  /** Every disagreement found, one line each (empty when `ok`). */
  problems: string[];
}

/** 0 everything agrees, 1 something is wrong, 2 the daemon cannot be reached. */
export function doctorExitCode(report: DoctorReport): 0 | 1 | 2 {
  if (!report.daemon.reachable) return 2;
  return report.ok ? 0 : 1;
}

export function nodeProblems(node: NodeChecks): string[] {
  const problems: string[] = [];
  for (const b of node.binaries) {
    if (!b.present) problems.push(`plugin binary missing in ${b.dir}`);
    else if (!b.identical) problems.push(`plugin binary in ${b.dir} differs from the image's${b.problem ? `: ${b.problem}` : ''}`);
  }
  if (node.cniConfig.problem !== undefined) problems.push(node.cniConfig.problem);
  if (!node.kubeconfig.present) problems.push(`plugin kubeconfig missing: ${node.kubeconfig.path}`);
  return problems;
}

export function daemonProblems(d: DaemonState): string[] {
  const problems: string[] = [];
  if (!d.installer.ready) problems.push(`installer not ready${d.installer.lastError ? `: ${d.installer.lastError}` : ''}`);
  if (d.ambient.enabled && d.ambient.ztunnelConnections === 0) problems.push('ambient: no ztunnel connected');
  const host = d.ambient.hostRules;
  if (host?.status === 'drift') problems.push(`ambient host probe rules: ${host.drift.map((x) => x.detail).join('; ')}`);
  if (host?.status === 'unverifiable') problems.push(`ambient host probe rules: cannot be verified: ${host.reason ?? ''}`);
  for (const p of d.pods) {
    if (p.status === 'drift') problems.push(`${p.pod}: ${p.drift.map((x) => `${x.kind} (${x.detail})`).join('; ')}`);
    if (p.status === 'unverifiable') problems.push(`${p.pod}: cannot be verified: ${p.reason ?? ''}`);
  }
  return problems;
}

function table(rows: string[][]): string {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length))) ?? [];
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i] ?? 0))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

/** The human-readable form; `detail` names one pod, shown in full. */
export function renderDoctorText(report: DoctorReport, detail?: string): string {
  const out: string[] = ['NODE'];
  for (const b of report.node.binaries) {
    out.push(
      `  plugin binary ${b.dir}/istio-cni: ${!b.present ? 'MISSING' : b.identical ? 'present, identical to the image' : `DIFFERS${b.problem ? ` (${b.problem})` : ''}`}`,
    );
  }
  const c = report.node.cniConfig;
  out.push(
    c.file === null
      ? `  CNI config: no config names istio-cni${c.problem ? ` (${c.problem})` : ''}`
      : `  CNI config: ${c.file}${c.primary ? ' (primary)' : ' (NOT the primary)'}, istio-cni is plugin ${c.position} of ${c.plugins}`,
  );
  out.push(`  plugin kubeconfig ${report.node.kubeconfig.path}: ${report.node.kubeconfig.present ? 'present' : 'MISSING'}`);
  const d = report.daemon;
  if (!d.reachable) {
    out.push('', `DAEMON: unreachable (${d.error})`);
  } else {
    const i = d.installer;
    out.push('', 'DAEMON');
    out.push(`  backend: ${d.backend}`);
    out.push(
      `  installer: ${i.ready ? 'ready' : 'NOT READY'}, ${i.passes} pass(es), last ${i.lastPassAt ?? 'never'}${i.lastError ? `, last error: ${i.lastError}` : ''}`,
    );
    out.push(`  ambient: ${d.ambient.enabled ? `on, ${d.ambient.ztunnelConnections ?? 0} ztunnel connection(s)` : 'off'}`);
    const host = d.ambient.hostRules;
    if (host !== undefined) {
      const last = host.lastVerification;
      out.push(
        `  host probe rules: ${host.status}${last === null ? '' : `, last verified ${last.at}${last.action ? ` (${last.action})` : ''}`}`,
      );
    }
    out.push(`  verification: every ${d.verification.intervalSeconds}s${d.verification.reportOnly ? ', report-only' : ''}`);
    if (!d.agent) out.push('  no Kubernetes API access: pods unknown');
    const pods = detail === undefined ? d.pods : d.pods.filter((p) => p.pod === detail);
    out.push('', 'PODS');
    if (pods.length === 0) out.push(detail === undefined ? '  (none tracked)' : `  ${detail}: not a pod this agent handles`);
    else {
      const rows = [['POD', 'MODE', 'NOW', 'DRIFT', 'LAST VERIFIED', 'LAST ACTION']];
      for (const p of pods) {
        rows.push([
          p.pod,
          p.mode,
          p.status,
          p.drift.map((x) => x.kind).join(',') || '-',
          p.lastVerification?.at ?? 'never',
          p.lastVerification?.action ?? p.lastVerification?.status ?? '-',
        ]);
      }
      out.push(
        ...table(rows)
          .split('\n')
          .map((l) => `  ${l}`),
      );
      if (detail !== undefined) {
        for (const p of pods) {
          if (p.reason) out.push('', `  ${p.status}: ${p.reason}`);
          for (const x of p.drift) out.push('', `  ${x.kind}:`, ...x.detail.split('; ').map((l) => `    ${l}`));
          if (p.lastVerification?.error) out.push('', `  last error: ${p.lastVerification.error}`);
        }
      }
    }
  }
  out.push('', report.problems.length === 0 ? 'OK: everything agrees' : `PROBLEMS (${report.problems.length})`);
  for (const p of report.problems) out.push(`  - ${p}`);
  return `${out.join('\n')}\n`;
}
