// The e2e rig itself: a real etcd + kube-apiserver and a real containerd (2.x, from its Go module)
// whose primary network is the reference plugins the rig builds. Every scenario test builds on exactly these pieces.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCnitool } from './support/cnitool.ts';
import { startRig, type Rig } from './support/rig.ts';
import { rigBinary } from './support/rigPaths.ts';
import { runCommand } from './support/runCommand.ts';

const NAMESPACE = 'e2e-smoke';

describe('e2e rig', () => {
  let rig: Rig | undefined;
  let podUid = '';

  before(async () => {
    rig = await startRig();
  });

  after(async () => {
    if (rig !== undefined) assert.deepEqual(await rig.stop(), [], 'the rig left host state behind');
  });

  test('the API server is ready and reports the pinned version', async () => {
    assert.ok(rig);
    const { cluster } = rig;
    const readyz = await cluster.api.request('GET', '/readyz');
    assert.equal(readyz.status, 200, readyz.text);
    const version = await cluster.api.must<{ gitVersion: string }>('GET', '/version');
    assert.match(version.gitVersion, /^v1\.\d+\.\d+/);
  });

  test('RBAC denies an unauthenticated write and an unbound service account', async () => {
    assert.ok(rig);
    const { cluster } = rig;
    const ns = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'e2e-forbidden' } };
    const anonymous = await cluster.anonymous.request('POST', '/api/v1/namespaces', ns);
    assert.equal(anonymous.status, 403, anonymous.text);

    await cluster.ensureNamespace(NAMESPACE);
    await cluster.ensureServiceAccount(NAMESPACE, 'nobody');
    const { token } = await cluster.requestServiceAccountToken(NAMESPACE, 'nobody', { expirationSeconds: 600 });
    const asNobody = cluster.api.withToken(token);
    const review = await asNobody.must<{ status: { userInfo: { username: string } } }>(
      'POST',
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    );
    assert.equal(review.status.userInfo.username, `system:serviceaccount:${NAMESPACE}:nobody`);
    const denied = await asNobody.request('POST', '/api/v1/namespaces', ns);
    assert.equal(denied.status, 403, denied.text);
  });

  test('a namespace and a pod object can be created', async () => {
    assert.ok(rig);
    const { cluster } = rig;
    await cluster.ensureNamespace(NAMESPACE, { 'e2e.istio-cni/smoke': 'true' });
    const pod = await cluster.api.must<{ metadata: { uid: string } }>('POST', `/api/v1/namespaces/${NAMESPACE}/pods`, {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'smoke' },
      spec: { nodeName: 'e2e-node', containers: [{ name: 'app', image: 'localhost/istio-cni-e2e/pause:v1' }] },
    });
    podUid = pod.metadata.uid;
    const read = await cluster.api.must<{ metadata: { labels?: Record<string, string> } }>('GET', `/api/v1/namespaces/${NAMESPACE}`);
    assert.equal(read.metadata.labels?.['e2e.istio-cni/smoke'], 'true');
    assert.match(podUid, /^[0-9a-f-]{36}$/);
  });

  test('crictl runp starts a sandbox on the reference bridge network; stopp and rmp tear it down', async () => {
    assert.ok(rig);
    const { containerd, network } = rig;
    const ipamDataDir = join(containerd.dir, 'ipam');
    assert.ok(
      network.conflist.plugins.some((p) => p.type === 'portmap'),
      'the primary conflist chains portmap',
    );

    const hostPort = 31080;
    const id = await containerd.runPodSandbox({
      metadata: { name: 'smoke', namespace: NAMESPACE, uid: podUid || '00000000-0000-0000-0000-000000000001' },
      hostname: 'smoke',
      port_mappings: [{ protocol: 0, container_port: 80, host_port: hostPort }],
    });
    const { status, info } = await containerd.inspectPodSandbox(id);
    assert.equal(status.state, 'SANDBOX_READY');
    const ip = status.network?.ip ?? '';
    assert.match(ip, /^10\.244\.250\.\d+$/);

    // The runtime is the rig's containerd 2.x, and so is the shim serving this sandbox (not a
    // distribution's containerd or shim that happens to be installed).
    const version = await containerd.crictl(['version']);
    assert.match(version, /^RuntimeName:\s+containerd$/m);
    assert.match(version, /^RuntimeVersion:\s+v2\./m);
    assert.equal(realpathSync(`/proc/${containerd.process.child.pid}/exe`), realpathSync(rigBinary('containerd')));
    const shims = (await runCommand(['ps', '-eo', 'pid=,args=']).then((r) => r.stdout))
      .split('\n')
      .filter((line) => line.includes(containerd.socket) && line.includes(`-id ${id}`))
      .map((line) => line.trim().split(/\s+/)[0] ?? '');
    assert.equal(shims.length, 1, `one shim serves sandbox ${id}`);
    assert.equal(realpathSync(`/proc/${shims[0]}/exe`), realpathSync(rigBinary('containerd-shim-runc-v2')));

    const spec = info.runtimeSpec as { linux: { namespaces: { type: string; path?: string }[] } };
    const netnsPath = spec.linux.namespaces.find((n) => n.type === 'network')?.path ?? '';
    assert.ok(existsSync(netnsPath), `sandbox netns ${netnsPath} exists`);
    const addr = await runCommand(['nsenter', `--net=${netnsPath}`, 'ip', '-o', '-4', 'addr', 'show', 'dev', 'eth0']);
    assert.ok(addr.stdout.includes(`${ip}/24`), addr.stdout);
    const dnat = await runCommand(['iptables', '-w', '-t', 'nat', '-S']);
    assert.ok(dnat.stdout.includes(`--dport ${hostPort}`), `portmap DNAT for ${hostPort} is installed:\n${dnat.stdout}`);
    assert.ok(readdirSync(join(ipamDataDir, network.name)).includes(ip), 'host-local recorded the lease');

    await containerd.stopPodSandbox(id);
    assert.equal(existsSync(netnsPath), false, 'the netns is gone after stopp');
    assert.equal(readdirSync(join(ipamDataDir, network.name)).includes(ip), false, 'host-local released the lease');
    const natAfter = await runCommand(['iptables', '-w', '-t', 'nat', '-S']);
    assert.equal(natAfter.stdout.includes(`--dport ${hostPort}`), false, 'portmap removed its DNAT rule');
    await containerd.removePodSandbox(id);
    assert.equal((await containerd.crictl(['pods', '-q'])).trim(), '');
  });

  test('cnitool drives the same conflist through ADD, CHECK and DEL in a scratch netns', async () => {
    assert.ok(rig);
    const { containerd, network } = rig;
    const netnsName = `e2e-cnitool-${process.pid}`;
    const netnsPath = `/var/run/netns/${netnsName}`;
    await runCommand(['ip', 'netns', 'add', netnsName]);
    try {
      const options = { confDir: containerd.cniConfDir, binDir: containerd.cniBinDir };
      const add = await runCnitool('add', network.name, netnsPath, options);
      const result = JSON.parse(add.stdout) as { cniVersion: string; ips: { address: string }[] };
      assert.equal(result.cniVersion, '1.0.0');
      assert.match(result.ips[0]?.address ?? '', /^10\.244\.250\.\d+\/24$/);
      await runCnitool('check', network.name, netnsPath, options);
      await runCnitool('del', network.name, netnsPath, options);
      const links = await runCommand(['ip', '-n', netnsName, '-o', 'link', 'show']);
      assert.equal(links.stdout.includes('eth0'), false, 'DEL removed eth0');
    } finally {
      await runCommand(['ip', 'netns', 'delete', netnsName], { allowFailure: true });
    }
  });
});
