import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  addCounts,
  counterDelta,
  descendants,
  formatPhaseTable,
  parsePrometheus,
  peakRate,
  rates,
  reduceScrape,
  requestDelta,
  statCpuTicks,
  statParentPid,
  statusRssKiB,
  watchGrowth,
  type PhaseFigures,
} from '../fleetMetrics.ts';

const SCRAPE = `# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 12
apiserver_request_total{code="500",component="apiserver",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="status",verb="PATCH",version="v1"} 4
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/readyz",verb="GET",version=""} 2
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="WATCH",version="v1"} 7
apiserver_longrunning_requests{component="apiserver",group="",resource="pods",scope="namespace",subresource="log",verb="CONNECT",version="v1"} 1
apiserver_registered_watchers{group="",kind="Pod",version="v1"} 9
apiserver_response_sizes_sum{component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 1.5e+06
apiserver_response_sizes_sum{component="apiserver",group="",resource="nodes",scope="resource",subresource="",verb="GET",version="v1"} 500
apiserver_watch_events_sizes_sum{group="",kind="Pod",version="v1"} 2048
process_cpu_seconds_total 42.5
weird_label{a="x\\"y}z"} 1
`;

test('parsePrometheus reads names, labels (escapes and braces in values) and values; skips comments', () => {
  const samples = parsePrometheus(SCRAPE);
  assert.equal(samples.length, 12);
  assert.deepEqual(samples.at(-2), { name: 'process_cpu_seconds_total', labels: {}, value: 42.5 });
  assert.deepEqual(samples.at(-1), { name: 'weird_label', labels: { a: 'x"y}z' }, value: 1 });
  assert.equal(samples[0]?.labels.verb, 'LIST');
});

test('reduceScrape sums requests by verb and resource across codes, watches, watchers and bytes', () => {
  const s = reduceScrape(SCRAPE);
  assert.deepEqual(s.requests, { 'LIST pods': 15, 'PATCH pods/status': 4, 'GET (none)//readyz': 2 });
  assert.equal(s.watches, 7);
  assert.deepEqual(s.watchesByResource, { pods: 7 });
  assert.equal(s.registeredWatchers, 9);
  assert.equal(s.responseBytes, 1_500_500);
  assert.equal(s.watchEventBytes, 2048);
});

test('counter deltas survive a server restart (a counter that went down counts from zero)', () => {
  assert.equal(counterDelta(10, 15), 5);
  assert.equal(counterDelta(10, 3), 3);
  assert.deepEqual(requestDelta({ 'LIST pods': 5, 'GET nodes': 2 }, { 'LIST pods': 9, 'GET nodes': 2, 'WATCH pods': 1 }), {
    'LIST pods': 4,
    'WATCH pods': 1,
  });
  assert.deepEqual(addCounts({ a: 1 }, { a: 2, b: 3 }), { a: 3, b: 3 });
});

test('/proc parsing: CPU ticks and parent past a comm with spaces and parentheses; VmRSS', () => {
  const stat = '1234 (install (cni) x) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 0 0';
  assert.equal(statCpuTicks(stat), 300);
  assert.equal(statParentPid(stat), 77);
  assert.equal(statusRssKiB('Name:\tx\nVmHWM:\t  9000 kB\nVmRSS:\t  4096 kB\n'), 4096);
  const parents = new Map([
    [2, 1],
    [3, 2],
    [4, 2],
    [5, 99],
  ]);
  assert.deepEqual(descendants(2, parents).sort(), [2, 3, 4]);
});

test('peakRate is the largest per-second growth between consecutive samples', () => {
  assert.equal(
    peakRate([
      { atMs: 0, value: 0 },
      { atMs: 2000, value: 10 },
      { atMs: 3000, value: 30 },
      { atMs: 5000, value: 2 },
    ]),
    20,
  );
  assert.equal(peakRate([]), 0);
  assert.deepEqual(
    rates([
      { atMs: 0, value: 4 },
      { atMs: 500, value: 6 },
    ]),
    [4],
  );
});

test('watchGrowth names the resources whose watches grew, by how much', () => {
  assert.deepEqual(watchGrowth({ pods: 1, configmaps: 30 }, { pods: 101, configmaps: 30, namespaces: 100 }), {
    pods: 100,
    namespaces: 100,
  });
});

test('formatPhaseTable prints figures and request rows with ratios ours / upstream', () => {
  const base: PhaseFigures = {
    wallS: 10,
    apiCpuS: 2,
    apiPeakRssMiB: 300,
    requests: { 'LIST pods': 10, 'WATCH pods': 10 },
    peakRequestsPerS: 5,
    requestRates: [5],
    watchesEnd: 10,
    watchesPeak: 10,
    responseMiB: 1,
    watchEventMiB: 0,
    agentMeanRssMiB: 40,
    agentMaxRssMiB: 45,
    agentCpuS: 0.5,
  };
  const table = formatPhaseTable('cold start', base, { ...base, apiCpuS: 1, requests: { 'LIST pods': 20, 'GET nodes': 1 } }, 10);
  assert.match(table, /^### cold start\n/);
  assert.match(table, /\| API server CPU, s \| 2\.0 \| 1\.0 \| 0\.50 \|/);
  assert.match(table, /\| requests: LIST pods \| 10 \| 20 \| 2\.00 \|/);
  assert.match(table, /\| requests: GET nodes \| 0 \| 1 \| ∞ \|/);
  assert.match(table, /\| watch event bytes, MiB \| 0\.00 \| 0\.00 \| 1\.00 \|/);
  assert.doesNotMatch(table, /settle/);
});
