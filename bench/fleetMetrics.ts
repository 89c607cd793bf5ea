/**
 * The pure half of the fleet benchmark (bench/fleet.ts): the API server's Prometheus text reduced
 * to the figures compared, deltas between two scrapes, /proc parsing and the printed table.
 */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Prometheus text exposition: one sample per line; comments and unparsable lines are skipped. */
export function parsePrometheus(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const brace = line.indexOf('{');
    const close = line.lastIndexOf('}');
    let name: string;
    let rest: string;
    const labels: Record<string, string> = {};
    if (brace !== -1 && close > brace) {
      name = line.slice(0, brace);
      for (const m of line.slice(brace + 1, close).matchAll(LABEL)) labels[m[1] as string] = (m[2] as string).replace(/\\(.)/g, '$1');
      rest = line.slice(close + 1);
    } else {
      const space = line.indexOf(' ');
      if (space === -1) continue;
      name = line.slice(0, space);
      rest = line.slice(space);
    }
    const value = Number(rest.trim().split(/\s+/)[0]);
    if (!Number.isNaN(value)) out.push({ name, labels, value });
  }
  return out;
}

/** What one scrape of the API server's /metrics says, reduced to the compared figures. */
export interface ApiScrape {
  /** apiserver_request_total by `VERB resource[/subresource]`. */
  requests: Record<string, number>;
  /** Open WATCH requests (apiserver_longrunning_requests). */
  watches: number;
  /** The same by resource. */
  watchesByResource: Record<string, number>;
  /** Watchers registered in the watch cache (apiserver_registered_watchers; absent on some versions). */
  registeredWatchers: number;
  /** Sum of apiserver_response_sizes (every response; a WATCH's when it ends), bytes. */
  responseBytes: number;
  /** Sum of apiserver_watch_events_sizes (events sent on watches), bytes. */
  watchEventBytes: number;
}

export function requestKey(labels: Record<string, string>): string {
  const resource = labels.resource === undefined || labels.resource === '' ? '(none)' : labels.resource;
  const sub = labels.subresource === undefined || labels.subresource === '' ? '' : `/${labels.subresource}`;
  return `${labels.verb ?? '?'} ${resource}${sub}`;
}

export function reduceScrape(text: string): ApiScrape {
  const scrape: ApiScrape = {
    requests: {},
    watches: 0,
    watchesByResource: {},
    registeredWatchers: 0,
    responseBytes: 0,
    watchEventBytes: 0,
  };
  for (const s of parsePrometheus(text)) {
    switch (s.name) {
      case 'apiserver_request_total': {
        const key = requestKey(s.labels);
        scrape.requests[key] = (scrape.requests[key] ?? 0) + s.value;
        break;
      }
      case 'apiserver_longrunning_requests':
        if (s.labels.verb === 'WATCH') {
          scrape.watches += s.value;
          const resource = s.labels.resource ?? '';
          scrape.watchesByResource[resource] = (scrape.watchesByResource[resource] ?? 0) + s.value;
        }
        break;
      case 'apiserver_registered_watchers':
        scrape.registeredWatchers += s.value;
        break;
      case 'apiserver_response_sizes_sum':
        scrape.responseBytes += s.value;
        break;
      case 'apiserver_watch_events_sizes_sum':
        scrape.watchEventBytes += s.value;
        break;
    }
  }
  return scrape;
}

export function totalRequests(scrape: Pick<ApiScrape, 'requests'>): number {
  let n = 0;
  for (const v of Object.values(scrape.requests)) n += v;
  return n;
}

/**
 * Counter growth from `before` to `after`. A counter that went down means the server restarted
 * between them: its value since the restart is the growth (what the old process counted after
 * `before` is lost; the caller scrapes just before a restart to keep that part small).
 */
export function counterDelta(before: number, after: number): number {
  return after >= before ? after - before : after;
}

export function requestDelta(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [key, v] of Object.entries(after)) {
    const d = counterDelta(before[key] ?? 0, v);
    if (d > 0) out[key] = d;
  }
  return out;
}

/** Adds counts key by key (the requests of a phase the API server restarted in, before and after). */
export function addCounts(a: Record<string, number>, b: Record<string, number>): Record<string, number> {
  const out = { ...a };
  for (const [key, v] of Object.entries(b)) out[key] = (out[key] ?? 0) + v;
  return out;
}

/** utime + stime in clock ticks from /proc/<pid>/stat (the comm field may hold spaces and parentheses). */
export function statCpuTicks(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields after comm start at 3 (state); utime and stime are 14 and 15.
  return Number(fields[11]) + Number(fields[12]);
}

export function statParentPid(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[1]);
}

/** VmRSS in KiB from /proc/<pid>/status. */
export function statusRssKiB(status: string): number {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN);
}

/** The pids of `root` and all its descendants, from a pid → parent pid map. */
export function descendants(root: number, parents: Map<number, number>): number[] {
  const children = new Map<number, number[]>();
  for (const [pid, ppid] of parents) {
    const list = children.get(ppid);
    if (list === undefined) children.set(ppid, [pid]);
    else list.push(pid);
  }
  const out: number[] = [];
  const stack = [root];
  for (let pid = stack.pop(); pid !== undefined; pid = stack.pop()) {
    out.push(pid);
    stack.push(...(children.get(pid) ?? []));
  }
  return out;
}

/** Per-second rates between consecutive (time ms, counter) samples. */
export function rates(samples: { atMs: number; value: number }[]): number[] {
  const out: number[] = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1] as { atMs: number; value: number };
    const b = samples[i] as { atMs: number; value: number };
    if (b.atMs > a.atMs) out.push((counterDelta(a.value, b.value) * 1000) / (b.atMs - a.atMs));
  }
  return out;
}

/** The largest of `rates`. */
export function peakRate(samples: { atMs: number; value: number }[]): number {
  return Math.max(0, ...rates(samples));
}

/** Resources whose open watches grew from `before` to `after` (what the agents watch), with the growth. */
export function watchGrowth(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [resource, v] of Object.entries(after)) {
    const d = v - (before[resource] ?? 0);
    if (d > 0) out[resource] = d;
  }
  return out;
}

/** One phase's figures for one side. */
export interface PhaseFigures {
  wallS: number;
  /** Phase-specific time (cold start: to all ready; API server restart: from its /readyz to every agent watch back), seconds. */
  settleS?: number;
  apiCpuS: number;
  apiPeakRssMiB: number;
  requests: Record<string, number>;
  peakRequestsPerS: number;
  /** Every sample's request rate, /s (the curve a restart's re-lists draw). */
  requestRates: number[];
  /** Open watches over the API server's own (those before any agent started). */
  watchesEnd: number;
  watchesPeak: number;
  responseMiB: number;
  watchEventMiB: number;
  agentMeanRssMiB: number;
  agentMaxRssMiB: number;
  agentCpuS: number;
}

const fmt = (v: number | undefined, digits: number) => (v === undefined || Number.isNaN(v) ? '-' : v.toFixed(digits));

function ratio(upstream: number | undefined, ours: number | undefined): string {
  if (upstream === undefined || ours === undefined || Number.isNaN(upstream) || Number.isNaN(ours)) return '-';
  if (upstream === 0) return ours === 0 ? '1.00' : '∞';
  return (ours / upstream).toFixed(2);
}

/**
 * One markdown table per phase: upstream, ours, ours/upstream. Request rows: every verb and
 * resource either side issued at least `minRequests` of, largest first.
 */
export function formatPhaseTable(phase: string, upstream: PhaseFigures, ours: PhaseFigures, nodes: number, minRequests = 1): string {
  const rows: [string, number | undefined, number | undefined, number][] = [
    ['wall time, s', upstream.wallS, ours.wallS, 1],
    ...(upstream.settleS !== undefined || ours.settleS !== undefined
      ? [
          ['time to settle (cold: all ready; restart: all watches back after /readyz), s', upstream.settleS, ours.settleS, 1] as [
            string,
            number | undefined,
            number | undefined,
            number,
          ],
        ]
      : []),
    ['API server CPU, s', upstream.apiCpuS, ours.apiCpuS, 1],
    ['API server peak RSS, MiB', upstream.apiPeakRssMiB, ours.apiPeakRssMiB, 0],
    ['requests, all', totalRequests(upstream), totalRequests(ours), 0],
    ['peak request rate, /s', upstream.peakRequestsPerS, ours.peakRequestsPerS, 0],
    ["agents' open watches at the end", upstream.watchesEnd, ours.watchesEnd, 0],
    ["agents' open watches, peak", upstream.watchesPeak, ours.watchesPeak, 0],
    ['response bytes (ended watches too), MiB', upstream.responseMiB, ours.responseMiB, 2],
    ['watch event bytes, MiB', upstream.watchEventMiB, ours.watchEventMiB, 2],
    [`agent RSS, mean of ${nodes}, MiB`, upstream.agentMeanRssMiB, ours.agentMeanRssMiB, 1],
    ['agent RSS, max, MiB', upstream.agentMaxRssMiB, ours.agentMaxRssMiB, 1],
    ['agent CPU, mean per agent, s', upstream.agentCpuS, ours.agentCpuS, 2],
  ];
  const keys = new Set([...Object.keys(upstream.requests), ...Object.keys(ours.requests)]);
  const requestRows = [...keys]
    .map((k): [string, number, number] => [k, upstream.requests[k] ?? 0, ours.requests[k] ?? 0])
    .filter(([, u, o]) => Math.max(u, o) >= minRequests)
    .sort((a, b) => Math.max(b[1], b[2]) - Math.max(a[1], a[2]) || a[0].localeCompare(b[0]));
  const lines = [`### ${phase}`, '', '| figure | upstream | ours | ours / upstream |', '|---|---:|---:|---:|'];
  for (const [name, u, o, digits] of rows) lines.push(`| ${name} | ${fmt(u, digits)} | ${fmt(o, digits)} | ${ratio(u, o)} |`);
  for (const [key, u, o] of requestRows) lines.push(`| requests: ${key} | ${u} | ${o} | ${ratio(u, o)} |`);
  return lines.join('\n');
}
