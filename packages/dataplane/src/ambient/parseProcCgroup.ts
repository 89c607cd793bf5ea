import { AmbientDataplaneError } from './ambientDataplaneError.ts';

/** One line of `/proc/<pid>/cgroup`: `hierarchy-ID:controller-list:cgroup-path`. */
export interface Cgroup {
  hierarchyId: string;
  controllers: string;
  path: string;
}

/** Pod UID ('' for runtimes that do not put it in the path, e.g. cri-o under kubeedge) and container ID. */
export interface CgroupPodIdentity {
  podUid: string;
  containerId: string;
}

/**
 * Parses `/proc/<pid>/cgroup`. Every line must have at least two colons (the path itself may
 * contain more); a malformed line fails the whole file, as upstream does.
 */
export function parseProcCgroup(text: string): Cgroup[] {
  const lines = text.split('\n');
  if (lines.at(-1) === '') lines.pop();
  return lines.map((raw) => {
    const line = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    const first = line.indexOf(':');
    const second = first < 0 ? -1 : line.indexOf(':', first + 1);
    if (second < 0) {
      throw new AmbientDataplaneError(
        'ERR_AMBIENT_PROC_ENTRY',
        `invalid cgroup entry ${JSON.stringify(line)}: expected "hierarchy:controllers:path"`,
      );
    }
    return { hierarchyId: line.slice(0, first), controllers: line.slice(first + 1, second), path: line.slice(second + 1) };
  });
}

// POSIX [[:punct:]] / [[:^punct:]] / [[:xdigit:]] as in Go's RE2 (ASCII only).
const P = String.raw`[!-\/:-@\[-\`{-~]`;
const NP = String.raw`[^!-\/:-@\[-\`{-~]`;
const X = '[0-9A-Fa-f]';
const UUID = `${X}{8}${P}?${X}{4}${P}?${X}{4}${P}?${X}{4}${P}?${X}{12}`;
// Non-punctuation or '/': upstream writes this `(?:[[:^punct:]]*/*)*`, which matches the same
// strings but backtracks exponentially in a backtracking engine such as V8's.
const NP_OR_SLASH = String.raw`[^!-.:-@\[-\`{-~]`;

/**
 * From SPIRE's k8s workload attestor via upstream: (1) `pod<uid>` followed, after any punctuated
 * segments (`docker-`, `cri-containerd:`), by the container ID at the end; (2) cri-o paths without
 * a pod UID, `crio-<id>`, valid only when no `pod<uid>` segment starts the match.
 */
const cgroupPatterns: readonly RegExp[] = [
  new RegExp(`${P}pod(?<poduid>${UUID})${P}(?:${NP}+${P})*(?<containerid>${NP}+)$`),
  new RegExp(`(?<poduid>)(?<mustnotmatch>pod${UUID}${P})?${NP_OR_SLASH}*crio${P}(?<containerid>${NP}+)$`),
];

/** Kubernetes writes UIDs with dashes; cgroup drivers may use `_` (systemd) or other punctuation. */
function canonicalPodUid(uid: string): string {
  // Go's unicode.IsPunct is the Unicode P category, which leaves ASCII symbols such as '+' alone.
  return uid.replace(/\p{P}/gu, '-');
}

const MAX_CGROUP_PATH = 4096;

/**
 * Pod UID and container ID encoded in one cgroup path (`.scope` suffix ignored), or undefined
 * when the path is not a pod container's, or when both patterns match (ambiguous).
 */
export function podIdentityFromCgroupPath(path: string): CgroupPodIdentity | undefined {
  // The unanchored patterns cost O(n²) in V8 (RE2 is linear); real paths are below PATH_MAX.
  if (path.length > MAX_CGROUP_PATH) return undefined;
  const trimmed = path.endsWith('.scope') ? path.slice(0, -'.scope'.length) : path;
  let found: CgroupPodIdentity | undefined;
  for (const pattern of cgroupPatterns) {
    const groups = pattern.exec(trimmed)?.groups;
    if (groups === undefined || (groups.mustnotmatch ?? '') !== '') continue;
    if (found !== undefined) return undefined;
    const uid = groups.poduid ?? '';
    found = { podUid: uid === '' ? '' : canonicalPodUid(uid), containerId: groups.containerid ?? '' };
  }
  return found;
}

/**
 * The one pod/container a process's cgroups point at. Lines without a container are skipped;
 * two different container IDs or pod UIDs are an error (the process cannot be attributed).
 * No container at all gives empty strings.
 */
export function podIdentityFromCgroups(cgroups: readonly Cgroup[]): CgroupPodIdentity {
  let podUid = '';
  let containerId = '';
  for (const cgroup of cgroups) {
    const candidate = podIdentityFromCgroupPath(cgroup.path);
    if (candidate === undefined) continue;
    if (containerId === '') {
      ({ podUid, containerId } = candidate);
    } else if (candidate.containerId !== containerId) {
      throw new AmbientDataplaneError(
        'ERR_AMBIENT_PROC_ENTRY',
        `multiple container IDs found in cgroups (${containerId}, ${candidate.containerId})`,
      );
    } else if (candidate.podUid !== podUid) {
      throw new AmbientDataplaneError('ERR_AMBIENT_PROC_ENTRY', `multiple pod UIDs found in cgroups (${podUid}, ${candidate.podUid})`);
    }
  }
  return { podUid, containerId };
}

/**
 * `starttime` of `/proc/<pid>/stat` (field 22, clock ticks since boot). The command name in
 * field 2 may itself contain spaces and parentheses, so fields are counted after the last `)`.
 */
export function parseProcStarttime(stat: string): number {
  const paren = stat.lastIndexOf(')');
  if (paren < 0) throw new AmbientDataplaneError('ERR_AMBIENT_PROC_ENTRY', `invalid stat format ${JSON.stringify(stat.slice(0, 80))}`);
  const fields = stat
    .slice(paren + 1)
    .trim()
    .split(/\s+/);
  const value = fields[19];
  if (value === undefined)
    throw new AmbientDataplaneError('ERR_AMBIENT_PROC_ENTRY', `not enough fields in stat ${JSON.stringify(stat.slice(0, 80))}`);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(Number(value))) {
    throw new AmbientDataplaneError('ERR_AMBIENT_PROC_ENTRY', `invalid starttime ${JSON.stringify(value)} in stat`);
  }
  return Number(value);
}
