/**
 * `plugin_dryrun_test.go` cases (testdata/upstream/inputs.md §3.2): pod inputs of the plugin goldens in
 * cni/pkg/plugin/testdata. status-ports.txt.golden is stale and unused. Shared by the capture
 * goldens and the `istio-iptables --pod` tests (the same pods must give the same rules).
 */
export interface PluginCase {
  readonly name: string;
  readonly golden: string;
  readonly annotations?: Record<string, string>;
  readonly env?: { name: string; value: string }[];
  readonly runAsUser?: number;
  readonly runAsGroup?: number;
}

export const PLUGIN_GOLDEN_CASES: readonly PluginCase[] = [
  { name: 'basic', golden: 'basic' },
  {
    name: 'include-exclude-ip',
    golden: 'include-exclude-ip',
    annotations: {
      'traffic.sidecar.istio.io/includeOutboundIPRanges': '127.0.0.0/8',
      'traffic.sidecar.istio.io/excludeOutboundIPRanges': '10.0.0.0/8',
    },
  },
  {
    name: 'include-exclude-ports',
    golden: 'include-exclude-ports',
    annotations: {
      'traffic.sidecar.istio.io/includeInboundPorts': '1111,2222',
      'traffic.sidecar.istio.io/excludeInboundPorts': '3333,4444',
      'traffic.sidecar.istio.io/excludeOutboundPorts': '5555,6666',
    },
  },
  { name: 'tproxy', golden: 'tproxy', annotations: { 'sidecar.istio.io/interceptionMode': 'TPROXY' } },
  { name: 'dns', golden: 'dns', env: [{ name: 'ISTIO_META_DNS_CAPTURE', value: 'true' }] },
  { name: 'invalid-drop', golden: 'invalid-drop', env: [{ name: 'INVALID_DROP', value: 'true' }] },
  { name: 'custom-uid', golden: 'custom-uid', runAsUser: 1000670000, runAsGroup: 1000670001 },
  { name: 'custom-uid-zero', golden: 'basic', runAsUser: 0 },
  {
    name: 'custom-uid-tproxy',
    golden: 'custom-uid-tproxy',
    annotations: { 'sidecar.istio.io/interceptionMode': 'TPROXY' },
    runAsUser: 1000670000,
    runAsGroup: 1000670001,
  },
];
