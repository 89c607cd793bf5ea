import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Command } from 'commander';
import {
  SETTING_SPECS,
  SettingsError,
  registerSettingsOptions,
  resolveSettings,
  checkInstallerPaths,
  type ParsedOptions,
} from '../src/settings/index.ts';

function parse(argv: string[]): ParsedOptions {
  const cmd = registerSettingsOptions(new Command('install-cni').exitOverride());
  cmd.parse(argv, { from: 'user' });
  return cmd.opts();
}

const host = { hostname: () => 'node-a' };

describe('settings', () => {
  it('defaults match upstream and the documented settings', () => {
    const s = resolveSettings({}, {}, host);
    assert.equal(s.cniBinSourceDir, '/opt/cni/bin');
    assert.deepEqual(s.cniBinTargetDirs, ['/host/opt/cni/bin']);
    assert.equal(s.mountedCniNetDir, '/host/etc/cni/net.d');
    assert.equal(s.cniAgentRunDir, '/var/run/istio-cni');
    assert.equal(s.serviceAccountDir, '/var/run/secrets/kubernetes.io/serviceaccount');
    assert.equal(s.kubeCaFile, '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt');
    assert.equal(s.hostProcDir, '/host/proc');
    assert.equal(s.hostNetnsDir, '/var/run/netns');
    assert.equal(s.readinessPort, 8000);
    assert.equal(s.monitoringPort, 15014);
    assert.equal(s.chainedCniPlugin, true);
    assert.equal(s.kubeconfigMode, 0o600);
    assert.equal(s.istioOwnedCniConfigFilename, '02-istio-cni.conflist');
    assert.equal(s.repair.enabled, true);
    assert.equal(s.repair.initContainerExitCode, 126);
    assert.equal(s.k8sNodeName, 'node-a');
    assert.equal(s.systemNamespace, 'istio-system');
    assert.deepEqual(s.excludeNamespaces, []);
    assert.deepEqual(s.logLevels, { agent: 'info', plugin: 'info' });
  });

  it('shows every file-mode setting in octal in --help', () => {
    const modes = SETTING_SPECS.filter((s) => s.kind === 'mode');
    const kubeconfigMode = modes.find((s) => s.env === 'KUBECONFIG_MODE');
    assert.ok(kubeconfigMode);
    // The octal default is what the setting resolves to when unset.
    assert.equal(resolveSettings({}, {}, host).kubeconfigMode, Number.parseInt(kubeconfigMode.default, 8));
    const help = registerSettingsOptions(new Command('install-cni')).helpInformation().replace(/\s+/g, ' ');
    for (const s of modes) {
      assert.match(s.default, /^0[0-7]{3,4}$/, `${s.env} default ${s.default}`);
      assert.ok(help.includes(`(env ${s.env}, default "${s.default}")`), `--help for ${s.env}: ${help}`);
    }
    assert.doesNotMatch(help, /"384"/);
  });

  it('flag beats env beats default', () => {
    const env = { CNI_CONF_NAME: 'from-env.conflist', MOUNTED_CNI_NET_DIR: '/env/net', CHAINED_CNI_PLUGIN: 'false' };
    const s = resolveSettings(parse(['--cni-conf-name', 'from-flag.conflist', '--chained-cni-plugin']), env, host);
    assert.equal(s.cniConfName, 'from-flag.conflist');
    assert.equal(s.mountedCniNetDir, '/env/net');
    assert.equal(s.chainedCniPlugin, true);
    assert.equal(resolveSettings(parse(['--chained-cni-plugin=false']), {}, host).chainedCniPlugin, false);
  });

  it('parses lists, modes, selectors and log levels', () => {
    const s = resolveSettings(
      parse(['--kubeconfig-mode', '0640', '--log_output_level', 'cni-agent:debug,cni-plugin:warn']),
      {
        CNI_BIN_TARGET_DIRS: '/a, /b,,',
        EXCLUDE_NAMESPACES: ' kube-system , istio-system',
        AMBIENT_ENABLEMENT_SELECTOR: '- podSelector:\n    matchLabels: {istio.io/dataplane-mode: ambient}\n',
      },
      host,
    );
    assert.deepEqual(s.cniBinTargetDirs, ['/a', '/b']);
    assert.deepEqual(s.excludeNamespaces, ['kube-system', 'istio-system']);
    assert.equal(s.kubeconfigMode, 0o640);
    assert.deepEqual(s.enablementSelectors, [
      { podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } }, namespaceSelector: {} },
    ]);
    assert.deepEqual(s.logLevels, { agent: 'debug', plugin: 'warn' });
    assert.equal(resolveSettings({}, { KUBECONFIG_MODE: '384' }, host).kubeconfigMode, 0o600);
  });

  it('AMBIENT_ENABLEMENT_SELECTOR: both keys on every selector, {} for an absent one, as upstream marshals them', () => {
    // The chart's default selectors; upstream's EnablementSelector has no omitempty, so its conflist
    // carries "namespaceSelector": {} on the first: ours must write the same bytes.
    const chartDefault =
      '- podSelector:\n    matchLabels: {istio.io/dataplane-mode: ambient}\n' +
      '- podSelector:\n    matchExpressions:\n    - { key: istio.io/dataplane-mode, operator: NotIn, values: [none] }\n' +
      '  namespaceSelector:\n    matchLabels: {istio.io/dataplane-mode: ambient}\n';
    const s = resolveSettings({}, { AMBIENT_ENABLEMENT_SELECTOR: chartDefault }, host);
    assert.equal(
      JSON.stringify(s.enablementSelectors),
      JSON.stringify([
        { podSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } }, namespaceSelector: {} },
        {
          podSelector: { matchExpressions: [{ key: 'istio.io/dataplane-mode', operator: 'NotIn', values: ['none'] }] },
          namespaceSelector: { matchLabels: { 'istio.io/dataplane-mode': 'ambient' } },
        },
      ]),
    );
    const onlyNamespace = resolveSettings({}, { AMBIENT_ENABLEMENT_SELECTOR: '- namespaceSelector: {matchLabels: {a: b}}\n' }, host);
    assert.equal(JSON.stringify(onlyNamespace.enablementSelectors), '[{"podSelector":{},"namespaceSelector":{"matchLabels":{"a":"b"}}}]');
  });

  it('rejects bad values with messages naming each setting', () => {
    assert.throws(
      () =>
        resolveSettings(
          {},
          { CHAINED_CNI_PLUGIN: 'yes', READINESS_PORT: '70000', KUBECONFIG_MODE: 'rw', AMBIENT_ENABLEMENT_SELECTOR: 'a: [' },
          host,
        ),
      (err: unknown) => {
        assert.ok(err instanceof SettingsError);
        for (const name of ['CHAINED_CNI_PLUGIN "yes"', 'READINESS_PORT "70000"', 'KUBECONFIG_MODE "rw"', 'AMBIENT_ENABLEMENT_SELECTOR']) {
          assert.ok(err.message.includes(name), `${err.message} names ${name}`);
        }
        return true;
      },
    );
    assert.throws(() => resolveSettings({}, { CNI_CONF_NAME: '../x.conflist' }, host), /CNI_CONF_NAME/);
  });

  it('VERIFY_INTERVAL is a Go duration (default 60s, 0 turns it off); VERIFY_REPORT_ONLY a bool flag', () => {
    const d = resolveSettings({}, {}, host);
    assert.equal(d.verifyIntervalMs, 60_000);
    assert.equal(d.verifyReportOnly, false);
    assert.equal(resolveSettings({}, { VERIFY_INTERVAL: '1m30s' }, host).verifyIntervalMs, 90_000);
    assert.equal(resolveSettings({}, { VERIFY_INTERVAL: '500ms' }, host).verifyIntervalMs, 500);
    assert.equal(resolveSettings({}, { VERIFY_INTERVAL: '0' }, host).verifyIntervalMs, 0);
    assert.equal(resolveSettings(parse(['--verify-interval', '10s', '--verify-report-only']), {}, host).verifyIntervalMs, 10_000);
    assert.equal(resolveSettings(parse(['--verify-report-only']), {}, host).verifyReportOnly, true);
    for (const bad of ['60', '-5s', '1x', '']) {
      assert.throws(() => resolveSettings({}, { VERIFY_INTERVAL: bad }, host), /VERIFY_INTERVAL/);
    }
  });

  it('unusable directories stop start-up naming the setting', async () => {
    await assert.rejects(
      checkInstallerPaths({
        cniBinSourceDir: '/nonexistent/src',
        cniBinTargetDirs: ['/nonexistent/bin'],
        mountedCniNetDir: '/etc/hostname',
      }),
      (err: unknown) => {
        const m = (err as Error).message;
        assert.match(m, /CNI_BIN_SOURCE_DIR "\/nonexistent\/src": does not exist/);
        assert.match(m, /CNI_BIN_TARGET_DIRS "\/nonexistent\/bin"/);
        assert.match(m, /MOUNTED_CNI_NET_DIR "\/etc\/hostname": not a directory/);
        return true;
      },
    );
  });
  it('settings this agent does not act on are refused at start when not at their default', () => {
    const refused = (opts: ParsedOptions, env: Record<string, string>): string => {
      try {
        resolveSettings(opts, env, host);
      } catch (err) {
        assert.ok(err instanceof SettingsError);
        return err.message;
      }
      return assert.fail(`accepted: ${JSON.stringify({ opts, env })}`);
    };
    for (const [env, value] of [
      ['REVISION', 'canary'],
      ['AMBIENT_USE_SCOPED_XTABLES_LOCKING', 'false'],
      ['CNI_NETWORK_CONFIG', '{}'],
      ['CNI_NETWORK_CONFIG_FILE', '/etc/cni.tmpl'],
      ['LOG_LEVEL', 'debug'],
    ] as const) {
      assert.match(refused({}, { [env]: value }), new RegExp(`^${env}="${value.replace(/[{}]/g, '\\$&')}" is not supported: `));
    }
    assert.match(refused(parse(['--log-level', 'info']), {}), /^LOG_LEVEL="info" is not supported: /);
    assert.match(refused(parse(['--log_as_json=false']), {}), /^log_as_json="false" is not supported: logs are always JSON/);
    assert.match(refused(parse(['--log_as_json=maybe']), {}), /invalid log_as_json "maybe"/);
    // At their defaults (or spelled differently) they are accepted.
    resolveSettings(parse(['--log_as_json']), { AMBIENT_USE_SCOPED_XTABLES_LOCKING: 'True', LOG_LEVEL: 'warn', REVISION: '' }, host);
    resolveSettings(parse(['--log_as_json=true']), {}, host);
  });

  it('EXCLUDE_NAMESPACES: each entry a namespace name, the error naming the value', () => {
    assert.deepEqual(resolveSettings({}, { EXCLUDE_NAMESPACES: 'kube-system, ns-1,,' }, host).excludeNamespaces, ['kube-system', 'ns-1']);
    for (const bad of ['kube_system', 'Kube-System', 'a/b', '-ns', `n${'s'.repeat(63)}`]) {
      assert.throws(
        () => resolveSettings({}, { EXCLUDE_NAMESPACES: `kube-system,${bad}` }, host),
        (err: unknown) =>
          err instanceof SettingsError &&
          err.message.includes(`invalid EXCLUDE_NAMESPACES ${JSON.stringify(`kube-system,${bad}`)}`) &&
          err.message.includes(`${JSON.stringify(bad)} is not a namespace name`),
        bad,
      );
    }
  });

  it('HOST_NETNS_DIR: an absolute directory without .., or empty (procfs only)', () => {
    assert.equal(resolveSettings({}, { HOST_NETNS_DIR: '/var/run/docker/netns' }, host).hostNetnsDir, '/var/run/docker/netns');
    assert.equal(resolveSettings({}, { HOST_NETNS_DIR: '' }, host).hostNetnsDir, '');
    for (const bad of ['var/run/netns', '/var/run/../etc', '/a\0b']) {
      assert.throws(
        () => resolveSettings({}, { HOST_NETNS_DIR: bad }, host),
        (err: unknown) => err instanceof SettingsError && err.message.includes(`invalid HOST_NETNS_DIR ${JSON.stringify(bad)}`),
        bad,
      );
    }
  });
});
