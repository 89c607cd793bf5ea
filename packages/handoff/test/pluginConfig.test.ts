import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CniError, parseNetConf } from '@istio-cni/cni';
import { buildPluginConfig, localPolicyOf, parsePluginConfig, pluginConfigText, type PluginConfig } from '@istio-cni/handoff';

function conf(extra: Record<string, unknown> = {}) {
  return parseNetConf(
    JSON.stringify({
      cniVersion: '1.0.0',
      name: 'k8s-pod-network',
      type: 'istio-cni',
      cni_agent_run_dir: '/run/x',
      pod_namespace: 'istio-system',
      exclude_namespaces: ['kube-system'],
      ...extra,
    }),
  );
}

describe('parsePluginConfig', () => {
  it("applies upstream's netconf defaults", () => {
    const c = parsePluginConfig(parseNetConf('{"cniVersion":"1.0.0","name":"n","type":"istio-cni"}'));
    assert.deepEqual(c, {
      pluginLogLevel: '',
      cniAgentRunDir: '/var/run/istio-cni',
      ambientEnabled: false,
      enablementSelectors: [],
      excludeNamespaces: [],
      podNamespace: '',
      nativeNftables: false,
      enableAmbientDetectionRetry: false,
      forceIptablesBinary: '',
    });
  });

  const bad: [string, unknown, RegExp][] = [
    ['ambient_enabled', 'true', /ambient_enabled must be a boolean/],
    ['exclude_namespaces', 'kube-system', /exclude_namespaces must be an array of strings/],
    ['exclude_namespaces', [1], /exclude_namespaces must be an array of strings/],
    ['cni_agent_run_dir', 5, /cni_agent_run_dir must be a string/],
    ['enablement_selectors', {}, /enablement_selectors: enablement selectors must be a list/],
    ['enablement_selectors', [{ podSelector: 'x' }], /enablement_selectors: \[0\]\.podSelector must be an object/],
  ];
  for (const [key, value, msg] of bad) {
    it(`rejects ${key}=${JSON.stringify(value)} with code 7`, () => {
      assert.throws(
        () => parsePluginConfig(conf({ [key]: value })),
        (err: unknown) => err instanceof CniError && err.code === 7 && msg.test(err.message),
      );
    });
  }
});

describe('buildPluginConfig', () => {
  const written: PluginConfig = {
    pluginLogLevel: 'debug',
    cniAgentRunDir: '/var/run/istio-cni',
    ambientEnabled: true,
    enablementSelectors: [{ podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } } }],
    excludeNamespaces: ['kube-system'],
    podNamespace: 'istio-system',
    nativeNftables: true,
    enableAmbientDetectionRetry: true,
    forceIptablesBinary: 'iptables-legacy',
  };

  it('writes what the plugin reads back', () => {
    const read = parsePluginConfig(parseNetConf(JSON.stringify(buildPluginConfig(written))));
    assert.deepEqual(read, {
      ...written,
      enablementSelectors: [{ podSelector: written.enablementSelectors[0]?.podSelector, namespaceSelector: {} }],
    });
  });

  it('writes force_iptables_binary only when set, and no excluded namespaces as null', () => {
    const entry = buildPluginConfig({ ...written, forceIptablesBinary: '', excludeNamespaces: [] });
    assert.equal('force_iptables_binary' in entry, false);
    assert.equal(entry.exclude_namespaces, null);
    assert.equal(buildPluginConfig(written).force_iptables_binary, 'iptables-legacy');
  });

  it('keeps upstream key order in the standalone file text', () => {
    const keys = Object.keys(JSON.parse(pluginConfigText(written)) as object);
    assert.deepEqual(keys.slice(0, 6), ['cniVersion', 'name', 'type', 'ipam', 'dns', 'plugin_log_level']);
    assert.ok(pluginConfigText(written).endsWith('}\n'));
  });
});

describe('localPolicyOf', () => {
  it('takes the agent namespace and the excluded namespaces from the entry', () => {
    assert.deepEqual(localPolicyOf(parsePluginConfig(conf())), { agentNamespace: 'istio-system', excludeNamespaces: ['kube-system'] });
  });
});
