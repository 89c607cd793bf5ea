import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_ENABLEMENT_SELECTORS, type Pod } from '@istio-cni/capture';
import { ADOPTED_KEY_PREFIX } from '../src/agent/nodeAgentHandler.ts';
import type { VerifiableAttachment } from '../src/agent/podVerifier.ts';
import { createSidecarAdoption } from '../src/agent/sidecarAdoption.ts';
import { captureLogger } from './testHelpers.ts';

function pod(name: string, o: { sidecar?: boolean; phase?: string; ips?: string[]; deleting?: boolean; hostNetwork?: boolean } = {}): Pod {
  return {
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      ...(o.sidecar === false ? {} : { annotations: { 'sidecar.istio.io/status': '{"containers":["istio-proxy"]}' } }),
      ...(o.deleting ? { deletionTimestamp: '2026-12-04T00:00:00Z' } : {}),
    },
    spec: {
      containers: o.sidecar === false ? [{ name: 'app' }] : [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }],
      ...(o.hostNetwork ? { hostNetwork: true } : {}),
    },
    status: { phase: o.phase ?? 'Running', podIPs: (o.ips ?? ['10.0.0.7', 'fd00::7']).map((ip) => ({ ip })) },
  };
}

function harness(pods: Pod[], located: Record<string, { netns: string; inode: number } | Error> = {}) {
  const attachments = new Map<string, VerifiableAttachment>();
  const asked: { uid: string; ips: readonly string[] }[] = [];
  const log = captureLogger();
  let current = pods;
  const adopt = createSidecarAdoption({
    view: { listPods: () => current, getNamespace: () => undefined },
    policy: { agentNamespace: 'istio-system', excludeNamespaces: ['kube-system'] },
    ambient: { enabled: false, selectors: DEFAULT_ENABLEMENT_SELECTORS },
    attachments: () => attachments,
    async locate(uid, ips) {
      asked.push({ uid, ips });
      const l = located[uid];
      if (l instanceof Error) throw l;
      return l;
    },
    adopt: (key, a) => attachments.set(key, a),
    forget: (key) => attachments.delete(key),
    logger: log.logger,
  });
  return { adopt, attachments, asked, log, setPods: (p: Pod[]) => (current = p) };
}

describe('sidecar adoption (pods no ADD reached the agent for)', () => {
  it('takes a running sidecar pod into verification at the netns its processes run in, once', async () => {
    const h = harness([pod('web')], { 'uid-web': { netns: '/host/proc/42/ns/net', inode: 4026532999 } });
    assert.equal(await h.adopt(), 1);
    assert.deepEqual(h.attachments.get(`${ADOPTED_KEY_PREFIX}uid-web`), {
      namespace: 'default',
      name: 'web',
      uid: 'uid-web',
      netns: '/host/proc/42/ns/net',
      mode: 'sidecar',
      ips: ['10.0.0.7', 'fd00::7'],
      netnsInode: 4026532999,
    });
    assert.deepEqual(h.asked, [{ uid: 'uid-web', ips: ['10.0.0.7', 'fd00::7'] }]);
    assert.equal(h.log.lines.filter((l) => l.pod === 'default/web' && l.level === 'info').length, 1);
    assert.equal(await h.adopt(), 0, 'tracked now: not looked for again');
    assert.equal(h.asked.length, 1);
  });

  it('leaves alone pods already tracked, outside the mesh, not running, being deleted, on the host network or without addresses', async () => {
    const h = harness([
      pod('tracked'),
      pod('plain', { sidecar: false }),
      pod('pending', { phase: 'Pending' }),
      pod('deleting', { deleting: true }),
      pod('host', { hostNetwork: true }),
      pod('noips', { ips: [] }),
    ]);
    h.attachments.set('ctr/eth0', {
      namespace: 'default',
      name: 'tracked',
      uid: 'uid-tracked',
      netns: '/var/run/netns/x',
      mode: 'sidecar',
    });
    assert.equal(await h.adopt(), 0);
    assert.deepEqual(h.asked, [], 'no procfs search for any of them');
  });

  it('adopts nothing when no netns carrying the pod is found, and goes on past a failed search', async () => {
    const h = harness([pod('a'), pod('b'), pod('c')], {
      'uid-a': new Error('procfs unreadable'),
      'uid-c': { netns: '/host/proc/7/ns/net', inode: 11 },
    });
    assert.equal(await h.adopt(), 1);
    assert.deepEqual([...h.attachments.keys()], [`${ADOPTED_KEY_PREFIX}uid-c`]);
    assert.ok(h.log.lines.some((l) => l.level === 'warn' && l.pod === 'default/a' && String(l.error).includes('procfs unreadable')));
    await h.adopt();
    assert.equal(h.log.lines.filter((l) => l.level === 'warn').length, 1, 'a search failing again is not logged again');
  });

  it('drops an adopted attachment once its pod leaves the API; attachments from an ADD stay', async () => {
    const h = harness([pod('web'), pod('other')], { 'uid-web': { netns: '/host/proc/42/ns/net', inode: 9 } });
    h.attachments.set('ctr/eth0', { namespace: 'default', name: 'gone', uid: 'uid-gone', netns: '/var/run/netns/g', mode: 'sidecar' });
    await h.adopt();
    h.setPods([pod('other')]);
    await h.adopt();
    assert.deepEqual([...h.attachments.keys()], ['ctr/eth0']);
  });
});
