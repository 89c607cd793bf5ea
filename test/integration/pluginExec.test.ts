/**
 * The built `dist/istio-cni` executed exactly as libcni does (env + stdin → stdout + exit code), for
 * every command × every CNI spec version, with prevResults produced by Debian's reference plugins in
 * real network namespaces, with and without the node agent running.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { SUPPORTED_VERSIONS } from '@istio-cni/cni';
import { EMULATION_SKIP, PLUGIN, makeHostRoot, startDaemon, type DaemonProcess, type HostRoot } from '../support/daemonProcess.ts';
import { execPlugin, type ExecResult } from '../support/execPlugin.ts';
import { startFakeKubeApi, type FakeKubeApi } from '../support/fakeKubeApi.ts';
import { referencePluginsSkip } from '../support/hostTools.ts';
import { addNetns, type NamedNetns } from '../support/netns.ts';
import { REFERENCE_MAX_VERSION, attachPrimary, type PrimaryKind } from '../support/referencePlugins.ts';
import { malformedCorpus } from '../../packages/cni/test/malformedCorpus.ts';

const atLeast = (v: string, min: string) => SUPPORTED_VERSIONS.indexOf(v) >= SUPPORTED_VERSIONS.indexOf(min);

function istioConf(cniVersion: string, runDir: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cniVersion,
    name: 'k8s-pod-network',
    type: 'istio-cni',
    plugin_log_level: 'debug',
    cni_agent_run_dir: runDir,
    ambient_enabled: false,
    exclude_namespaces: ['kube-system'],
    pod_namespace: 'istio-system',
    ...extra,
  };
}

function env(command: string, netns = '/var/run/netns/none'): Record<string, string> {
  return {
    CNI_COMMAND: command,
    CNI_CONTAINERID: 'c0ffee',
    CNI_NETNS: netns,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=u-1;K8S_POD_INFRA_CONTAINER_ID=c0ffee',
  };
}

function json(res: ExecResult): Record<string, unknown> {
  try {
    return JSON.parse(res.stdout) as Record<string, unknown>;
  } catch {
    throw new Error(`stdout is not JSON (exit ${res.code}): ${res.stdout}\nstderr: ${res.stderr}`);
  }
}

function assertCniError(res: ExecResult, code: number): Record<string, unknown> {
  const out = json(res);
  assert.equal(res.code, 1, `exit code; stdout ${res.stdout}`);
  assert.equal(out.code, code, `CNI error code; stdout ${res.stdout}`);
  assert.equal(typeof out.msg, 'string');
  assert.doesNotMatch(res.stdout, /\n\s+at /, 'no stack trace on stdout');
  return out;
}

function assertStderrIsJsonLines(res: ExecResult): void {
  for (const line of res.stderr.split('\n').filter(Boolean)) {
    assert.doesNotThrow(() => JSON.parse(line), `stderr line is not JSON: ${line}`);
  }
}

let root: HostRoot;
let daemon: DaemonProcess;
let api: FakeKubeApi;

const skip = EMULATION_SKIP;

before(async () => {
  if (skip) return;
  root = makeHostRoot();
  api = await startFakeKubeApi();
  api.upsertNamespace({ metadata: { name: 'default' } });
  api.upsertPod({ metadata: { name: 'web-0', namespace: 'default' }, spec: { nodeName: 'test-node', containers: [{ name: 'app' }] } });
  const kubeconfig = join(root.dir, 'agent-kubeconfig');
  api.writeKubeconfig(kubeconfig);
  daemon = await startDaemon(root, { KUBECONFIG: kubeconfig }, true, ['--log_output_level=cni-plugin:debug']);
});
after(async () => {
  await daemon?.stop();
  await api?.close();
  root?.remove();
});

describe('istio-cni VERSION', { skip }, () => {
  for (const v of SUPPORTED_VERSIONS) {
    it(`[${v}] answers supportedVersions locally`, async () => {
      const res = await execPlugin(PLUGIN, { CNI_COMMAND: 'VERSION' }, JSON.stringify({ cniVersion: v }));
      assert.equal(res.code, 0, res.stdout + res.stderr);
      const out = json(res);
      assert.deepEqual(out.supportedVersions, [...SUPPORTED_VERSIONS]);
    });
  }

  it('prints the about text to stderr when CNI_COMMAND is unset', async () => {
    const res = await execPlugin(PLUGIN, {}, '');
    assert.equal(res.code, 0);
    assert.equal(res.stdout, '');
    assert.match(res.stderr, /CNI plugin istio-cni/);
  });
});

describe('istio-cni with the agent running (every command × version)', { skip }, () => {
  for (const v of SUPPORTED_VERSIONS) {
    it(`[${v}] ADD without prevResult prints an empty result of that version`, async () => {
      const res = await execPlugin(PLUGIN, env('ADD'), JSON.stringify(istioConf(v, root.runDir)));
      assert.equal(res.code, 0, res.stdout + res.stderr);
      const out = json(res);
      assert.equal(out.cniVersion, v);
      assert.equal(out.ips ?? out.ip4, undefined);
      assertStderrIsJsonLines(res);
    });

    it(`[${v}] DEL succeeds and prints nothing`, async () => {
      const res = await execPlugin(PLUGIN, env('DEL'), JSON.stringify(istioConf(v, root.runDir)));
      assert.equal(res.code, 0, res.stdout + res.stderr);
      assert.equal(res.stdout, '');
    });

    it(`[${v}] CHECK ${atLeast(v, '0.4.0') ? 'succeeds' : 'is refused as before 0.4.0'}`, async () => {
      const res = await execPlugin(PLUGIN, env('CHECK'), JSON.stringify(istioConf(v, root.runDir)));
      if (atLeast(v, '0.4.0')) assert.equal(res.code, 0, res.stdout + res.stderr);
      else assertCniError(res, 1);
    });

    for (const cmd of ['GC', 'STATUS']) {
      it(`[${v}] ${cmd} ${atLeast(v, '1.1.0') ? 'succeeds' : 'is refused as before 1.1.0'}`, async () => {
        const conf = istioConf(v, root.runDir, { 'cni.dev/valid-attachments': [{ containerID: 'c0ffee', ifname: 'eth0' }] });
        const res = await execPlugin(PLUGIN, env(cmd), JSON.stringify(conf));
        if (atLeast(v, '1.1.0')) assert.equal(res.code, 0, res.stdout + res.stderr);
        else assertCniError(res, 1);
      });
    }
  }

  it('logs JSON to stderr only and forwards the same lines to the agent log sink', async () => {
    const res = await execPlugin(PLUGIN, { ...env('ADD'), CNI_CONTAINERID: 'logfwd' }, JSON.stringify(istioConf('1.1.0', root.runDir)));
    assert.equal(res.code, 0);
    const line = res.stderr.split('\n').find((l) => l.includes('pod handled by agent'));
    assert.ok(line, `no hand-off line on stderr: ${res.stderr}`);
    assert.doesNotMatch(res.stdout, /cni-plugin/);
    const sent = JSON.parse(line) as { time: string; pod: string };
    // The daemon re-emits the plugin's line in its own log with the original time and fields.
    const echoed = await daemon.waitForLog((e) => e.msg === 'pod handled by agent' && e.containerID === 'logfwd');
    assert.equal(echoed.time, sent.time);
    assert.equal(echoed.pod, 'default/web-0');
  });
});

describe('istio-cni without the agent', { skip }, () => {
  const noAgentDir = mkdtempSync(join(tmpdir(), 'istio-cni-noagent-'));
  after(() => rmSync(noAgentDir, { recursive: true, force: true }));

  it('ADD fails with code 11 (try again later) and says the agent is unreachable', async () => {
    const res = await execPlugin(PLUGIN, env('ADD'), JSON.stringify(istioConf('1.0.0', noAgentDir)));
    const out = assertCniError(res, 11);
    assert.match(String(out.msg), /agent is not reachable/);
  });

  it('DEL succeeds', async () => {
    const res = await execPlugin(PLUGIN, env('DEL'), JSON.stringify(istioConf('1.0.0', noAgentDir)));
    assert.equal(res.code, 0, res.stdout);
  });

  it('STATUS answers 0 with no agent, ambient on or off and no kubeconfig: kubelet must be able to start the agent', async () => {
    for (const extra of [{}, { ambient_enabled: true }]) {
      const res = await execPlugin(PLUGIN, env('STATUS'), JSON.stringify(istioConf('1.1.0', noAgentDir, extra)));
      assert.equal(res.code, 0, res.stdout + res.stderr);
    }
  });

  it('GC succeeds', async () => {
    const res = await execPlugin(PLUGIN, env('GC'), JSON.stringify(istioConf('1.1.0', noAgentDir)));
    assert.equal(res.code, 0, res.stdout);
  });

  it('passes through the agent pod, excluded namespaces and non-Kubernetes invocations without the agent', async () => {
    const cases: Record<string, string>[] = [
      { ...env('ADD'), CNI_ARGS: 'K8S_POD_NAMESPACE=istio-system;K8S_POD_NAME=istio-cni-node-x7k2p;IgnoreUnknown=1' },
      { ...env('ADD'), CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-1' },
      { ...env('ADD'), CNI_ARGS: '' },
    ];
    for (const e of cases) {
      const res = await execPlugin(PLUGIN, e, JSON.stringify(istioConf('1.0.0', noAgentDir)));
      assert.equal(res.code, 0, `${e.CNI_ARGS}: ${res.stdout}`);
      assert.equal(json(res).cniVersion, '1.0.0');
    }
  });
});

describe('istio-cni malformed input corpus (exec level)', { skip }, () => {
  for (const c of malformedCorpus) {
    it(`${c.name} → code ${c.code}`, async () => {
      const res = await execPlugin(PLUGIN, c.env, c.stdin);
      assertCniError(res, c.code);
    });
  }
});

describe('istio-cni pass-through of real prevResults', { skip: skip || referencePluginsSkip }, () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'istio-cni-ipam-'));
  const namespaces: NamedNetns[] = [];
  after(() => {
    for (const ns of namespaces) ns.remove();
    rmSync(dataDir, { recursive: true, force: true });
  });

  let index = 0;
  for (const kind of ['bridge', 'ptp'] as PrimaryKind[]) {
    for (const v of SUPPORTED_VERSIONS) {
      it(`[${v}] ${kind} + host-local result is passed through unchanged`, async () => {
        const node = addNetns('icni-node');
        const pod = addNetns('icni-pod');
        namespaces.push(node, pod);
        // The reference plugins stop at 1.0.0; a runtime hands a 1.0.0 result to a 1.1.0 chain as is.
        const primaryVersion = atLeast(v, REFERENCE_MAX_VERSION) ? REFERENCE_MAX_VERSION : v;
        const primary = await attachPrimary(kind, primaryVersion, node, pod, dataDir, index++);
        const prevResult = { ...primary.result, cniVersion: v };
        const res = await execPlugin(
          PLUGIN,
          { ...env('ADD', pod.path), CNI_CONTAINERID: primary.cniEnv.CNI_CONTAINERID as string },
          JSON.stringify({ ...istioConf(v, root.runDir), prevResult }),
        );
        assert.equal(res.code, 0, res.stdout + res.stderr);
        assert.deepEqual(json(res), prevResult);
      });
    }
  }
});
