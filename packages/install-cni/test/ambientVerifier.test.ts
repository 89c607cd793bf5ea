import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ambientConfigFromOptions, type Pod } from '@istio-cni/capture';
import {
  type AmbientPodRulePlan,
  type AmbientRuleBackend,
  createNetnsHandle,
  type Drift,
  type IptablesBackend,
  type PodProcessNetns,
  type ProbeSetEntry,
} from '@istio-cni/dataplane';
import { createAmbientVerifier } from '../src/ambient/ambientVerifier.ts';

const ambientLabels = { 'istio.io/dataplane-mode': 'ambient' };

function pod(name: string, opts: { labels?: Record<string, string>; annotation?: string; deleting?: boolean } = {}): Pod {
  return {
    metadata: {
      name,
      namespace: 'default',
      uid: `uid-${name}`,
      labels: opts.labels ?? ambientLabels,
      annotations: opts.annotation === undefined ? {} : { 'ambient.istio.io/redirection': opts.annotation },
      ...(opts.deleting ? { deletionTimestamp: '2026-12-01T00:00:00Z' } : {}),
    },
    spec: { containers: [{ name: 'app' }] },
    status: { phase: 'Running', podIP: '10.0.0.5', podIPs: [{ ip: '10.0.0.5' }] },
  };
}

function harness(
  pods: Pod[],
  opts: {
    enrolled?: string[];
    probeSet?: ProbeSetEntry[];
    ztunnelHas?: boolean | undefined;
    rules?: Drift[];
    inspectError?: string;
    generation?: () => number;
    backend?: AmbientRuleBackend;
    fingerprint?: (families: readonly string[] | undefined) => string;
    /** The iptables backend `inspect` says it read the rules from. */
    readFrom?: IptablesBackend;
    /** Host probe rules: what `verify` finds (an Error: it throws). */
    hostRules?: string[] | Error;
    /** The /proc scan: each call takes the next result (the last one repeats); pod UID → its oldest process. */
    scans?: Record<string, PodProcessNetns>[];
    /** Whether the netns a process runs in carries the pod's IPs. */
    carries?: boolean;
    /** Processes that still run where they were seen (`stillIn`), by pid. */
    alive?: Set<string>;
    /** The namespaces the cache has seen (default: every one asked for). */
    namespaces?: string[];
  } = {},
) {
  const calls: string[] = [];
  const inspectedPlans: AmbientPodRulePlan[] = [];
  const handle = createNetnsHandle({ fd: 99, inode: 1, source: 'test', path: '/fake/netns', release: () => undefined });
  const enrolled = new Set(opts.enrolled ?? pods.map((p) => p.metadata.uid ?? ''));
  const verifier = createAmbientVerifier({
    view: {
      getPod: (ns, name) => pods.find((p) => p.metadata.namespace === ns && p.metadata.name === name),
      getNamespace: (name) => (opts.namespaces === undefined || opts.namespaces.includes(name) ? { metadata: { name } } : undefined),
      listPods: () => pods,
    },
    policy: { selectors: [{ podSelector: { matchLabels: ambientLabels } }], excludeNamespaces: [], systemNamespace: 'istio-system' },
    cache: { has: (uid) => enrolled.has(uid), get: (uid) => (enrolled.has(uid) ? handle : undefined) },
    rules: {
      runner: { run: async () => ({ stdout: '', stderr: '' }) },
      openScratchNetns: async () => ({ path: '', close: async () => {} }),
    },
    backend: opts.backend ?? { kind: 'nft' },
    config: ambientConfigFromOptions({}),
    sets: {
      list: async () => {
        calls.push('list');
        return opts.probeSet ?? [{ family: 4, ip: '10.0.0.5', uid: 'uid-web' }];
      },
      addPod: async (uid, ips) => {
        calls.push(`probe add ${uid} ${ips.join(',')}`);
        return [...ips];
      },
    },
    ztunnel: {
      hasPod: () => ('ztunnelHas' in opts ? opts.ztunnelHas : true),
      podAdded: async (uid, _w, fd) => void calls.push(`ztunnel add ${uid} fd ${fd}`),
    },
    annotator: {
      annotate: async (ns, name, key, value) => void calls.push(`annotate ${ns}/${name} ${key}=${value}`),
    },
    enrol: async (p, ips) => void calls.push(`enrol ${p.metadata.name} ${ips.join(',')}`),
    ...(opts.generation === undefined ? {} : { nftGenerations: { read: opts.generation } }),
    ...(opts.fingerprint === undefined
      ? {}
      : { legacyFingerprints: { fingerprint: (_fd, families) => opts.fingerprint?.(families) ?? '' } }),
    ...(opts.hostRules === undefined
      ? {}
      : {
          hostRules: {
            verify: async () => {
              calls.push('host verify');
              if (opts.hostRules instanceof Error) throw opts.hostRules;
              return opts.hostRules ?? [];
            },
            repair: async () => void calls.push('host repair'),
          },
        }),
    ...(opts.scans === undefined
      ? {}
      : {
          sandboxes: {
            locator: async () => ({
              scan: async () => {
                calls.push('scan');
                const next = opts.scans?.length === 1 ? opts.scans[0] : opts.scans?.shift();
                return new Map(Object.entries(next ?? {}));
              },
              stillIn: async (p) => opts.alive?.has(p.pid) ?? false,
              carries: async (p, ips) => {
                calls.push(`carries ${p.inode} ${ips.join(',')}`);
                return opts.carries ?? true;
              },
            }),
            replace: async (p, ips) => void calls.push(`replace ${p.metadata.name} ${ips.join(',')}`),
          },
        }),
    podRules: {
      inspect: async (path, plan) => {
        calls.push(`inspect ${path}`);
        inspectedPlans.push(plan);
        if (opts.inspectError !== undefined) throw new Error(opts.inspectError);
        return { drift: opts.rules ?? [], ...(opts.readFrom ? { iptables: opts.readFrom } : {}) };
      },
      repair: async (netns) => void calls.push(`rules reconcile ${netns.path}`),
    },
  });
  return { verifier, calls, inspectedPlans };
}

function iptablesBackend(flavor: 'legacy' | 'nft'): IptablesBackend {
  const binaries = (prefix: string) => ({
    save: `${prefix}tables-${flavor}-save`,
    restore: `${prefix}tables-${flavor}-restore`,
    iptables: `${prefix}tables-${flavor}`,
  });
  return {
    flavor,
    nfTables: flavor === 'nft',
    version: { major: 1, minor: 8, patch: 9 },
    binaries: { ipv4: binaries('ip'), ipv6: binaries('ip6') },
  };
}

async function verifyOnly(h: ReturnType<typeof harness>) {
  const targets = h.verifier.targets();
  assert.equal(targets.length, 1);
  return h.verifier.verify(targets[0] as (typeof targets)[number]);
}

describe('ambient verifier', () => {
  it('an enrolled pod with rules, probe set, ztunnel ack and annotation in place is ok', async () => {
    const h = harness([pod('web', { annotation: 'enabled' })]);
    assert.deepEqual(h.verifier.targets(), [{ key: 'ambient/uid-web', pod: 'default/web' }]);
    assert.deepEqual(await verifyOnly(h), { status: 'ok' });
    assert.deepEqual(h.calls, ['inspect /fake/netns', 'list']);
  });

  it('a pod whose namespace the cache has not seen yet is skipped, not judged: its annotation stays', async () => {
    const h = harness([pod('web', { labels: {}, annotation: 'enabled' })], { enrolled: [], namespaces: [] });
    assert.deepEqual(await verifyOnly(h), { status: 'skipped', reason: 'namespace not in the cache yet' });
    assert.deepEqual(h.calls, []);
  });

  it('lists the probe set once for several pods checked in a row', async () => {
    const h = harness([pod('web', { annotation: 'enabled' }), pod('api', { annotation: 'enabled' })], {
      probeSet: [
        { family: 4, ip: '10.0.0.5', uid: 'uid-web' },
        { family: 4, ip: '10.0.0.5', uid: 'uid-api' },
      ],
    });
    for (const t of h.verifier.targets()) assert.equal((await h.verifier.verify(t)).status, 'ok');
    assert.equal(h.calls.filter((c) => c === 'list').length, 1);
  });

  it('each drift kind is repaired as addPodToMesh would, in its order', async () => {
    const h = harness([pod('web', { annotation: 'pending' })], {
      probeSet: [],
      ztunnelHas: false,
      rules: [{ kind: 'rules_missing', detail: 'table inet istio-ambient-nat missing' }],
    });
    const out = await verifyOnly(h);
    assert.equal(out.status, 'drift');
    assert.ok(out.status === 'drift' && out.repair);
    assert.deepEqual(
      out.drift.map((d) => d.kind),
      ['rules_missing', 'probe_set', 'ztunnel', 'annotation'],
    );
    assert.equal(out.confirm, false, 'an annotation write is seen only once the watch delivers it');
    h.calls.length = 0;
    await out.repair();
    assert.deepEqual(h.calls, [
      'rules reconcile /fake/netns',
      'ztunnel add uid-web fd 99',
      'probe add uid-web 10.0.0.5',
      'annotate default/web ambient.istio.io/redirection=enabled',
    ]);
  });

  it('a pod missing from a shared listing is looked up in a fresh one before it counts as drift', async () => {
    const h = harness([pod('web', { annotation: 'enabled' })], { probeSet: [] });
    const out = await verifyOnly(h);
    assert.equal(out.status, 'drift');
    assert.equal(h.calls.filter((c) => c === 'list').length, 2);
  });

  it('no ztunnel connected is not drift', async () => {
    const h = harness([pod('web', { annotation: 'enabled' })], { ztunnelHas: undefined });
    assert.deepEqual(await verifyOnly(h), { status: 'ok' });
  });

  it('an annotation on a pod outside the mesh is removed', async () => {
    const h = harness([pod('web', { labels: {}, annotation: 'enabled' })], { enrolled: [] });
    const out = await verifyOnly(h);
    assert.ok(out.status === 'drift' && out.repair);
    assert.deepEqual(
      out.drift.map((d) => d.kind),
      ['annotation'],
    );
    await out.repair();
    assert.deepEqual(h.calls, ['annotate default/web ambient.istio.io/redirection=null']);
  });

  it('legitimate changes are skipped: deletion, deselection in progress, no IP yet', async () => {
    const noIp: Pod = { ...pod('web', { annotation: 'pending' }), status: { phase: 'Pending' } };
    const cases: [Pod, string[], RegExp][] = [
      [pod('web', { annotation: 'enabled', deleting: true }), ['uid-web'], /being deleted/],
      [pod('web', { labels: {}, annotation: 'enabled' }), ['uid-web'], /informers remove it/],
      [noIp, [], /no IP yet/],
    ];
    for (const [p, enrolled, reason] of cases) {
      const h = harness([p], { enrolled });
      const out = await verifyOnly(h);
      assert.equal(out.status, 'skipped');
      assert.match(out.status === 'skipped' ? out.reason : '', reason);
      assert.deepEqual(h.calls, []);
    }
  });

  it('a pod annotated as enrolled whose netns the agent does not hold (a reboot) is enrolled by its IPs, not trusted', async () => {
    for (const annotation of ['enabled', 'pending', undefined]) {
      const h = harness([pod('web', annotation === undefined ? {} : { annotation })], { enrolled: [] });
      const out = await verifyOnly(h);
      assert.ok(out.status === 'drift' && out.repair, JSON.stringify(out));
      assert.deepEqual(
        out.drift.map((d) => d.kind),
        ['not_enrolled'],
      );
      assert.match(out.drift[0]?.detail ?? '', annotation === undefined ? /selected for ambient/ : new RegExp(`"${annotation}"`));
      assert.notEqual(out.confirm, false, 'the enrolment is checked again in full after the repair');
      assert.deepEqual(h.calls, [], 'nothing read or written before the repair');
      await out.repair();
      assert.deepEqual(h.calls, ['enrol web 10.0.0.5']);
    }
  });

  it('in-pod rules found in place are not read again until the netns nf_tables generation moves', async () => {
    let generation = 5;
    const h = harness([pod('web', { annotation: 'enabled' })], { generation: () => generation });
    const inspections = () => h.calls.filter((c) => c.startsWith('inspect')).length;
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(inspections(), 1);
    generation = 6;
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(inspections(), 2);
  });

  it('each pass takes one fresh probe-set listing: an IP removed since the last pass is drift', async () => {
    const probeSet: ProbeSetEntry[] = [{ family: 4, ip: '10.0.0.5', uid: 'uid-web' }];
    const h = harness([pod('web', { annotation: 'enabled' })], { probeSet, generation: () => 5 });
    assert.equal((await verifyOnly(h)).status, 'ok');
    probeSet.length = 0;
    const out = await verifyOnly(h);
    assert.equal(out.status, 'drift');
    assert.deepEqual(out.status === 'drift' ? out.drift.map((d) => d.kind) : [], ['probe_set']);
    // One listing for the first pass; the second pass's own, then a fresh one before counting it missing.
    assert.equal(h.calls.filter((c) => c === 'list').length, 3);
  });

  it('a pod updated with other overrides is read against its new plan at an unchanged generation', async () => {
    const pods = [pod('web', { annotation: 'enabled' })];
    const h = harness(pods, { generation: () => 5 });
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(h.inspectedPlans.length, 1, 'the same pod object at the same generation is not read again');
    const base = pod('web', { annotation: 'enabled' });
    const updated: Pod = {
      ...base,
      metadata: { ...base.metadata, annotations: { ...base.metadata.annotations, 'ambient.istio.io/bypass-inbound-capture': 'true' } },
    };
    pods[0] = updated;
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(h.inspectedPlans.length, 2);
    assert.notDeepEqual(h.inspectedPlans[1], h.inspectedPlans[0], 'compared with the plan of the new overrides');
    // An update that leaves the overrides as they were shares the plan: not read again.
    pods[0] = { ...updated, metadata: { ...updated.metadata, labels: { ...updated.metadata.labels, tier: 'web' } } };
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(h.inspectedPlans.length, 2);
  });

  it('on iptables-legacy, in-pod rules found in place are not read again until the legacy tables fingerprint moves', async () => {
    const legacy = iptablesBackend('legacy');
    let fingerprint = 'a';
    const asked: (readonly string[] | undefined)[] = [];
    const h = harness([pod('web', { annotation: 'enabled' })], {
      backend: { kind: 'iptables', iptables: legacy },
      readFrom: legacy,
      fingerprint: (families) => {
        asked.push(families);
        return fingerprint;
      },
    });
    const inspections = () => h.calls.filter((c) => c.startsWith('inspect')).length;
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(inspections(), 1);
    assert.deepEqual(asked[0], ['ipv4'], 'the families the plan has rules for (IPv6 off)');
    fingerprint = 'b';
    assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(inspections(), 2);
  });

  it('on iptables-legacy, a pod whose rules were found in another backend (adopted) is read every pass', async () => {
    const h = harness([pod('web', { annotation: 'enabled' })], {
      backend: { kind: 'iptables', iptables: iptablesBackend('legacy') },
      readFrom: iptablesBackend('nft'),
      fingerprint: () => 'a',
    });
    for (let i = 0; i < 3; i++) assert.equal((await verifyOnly(h)).status, 'ok');
    assert.equal(h.calls.filter((c) => c.startsWith('inspect')).length, 3);
  });

  describe('a sandbox re-created under the same UID (netns_replaced)', () => {
    const inHeld: PodProcessNetns = { pid: '40', startTime: 100, inode: 1 };
    const inNew: PodProcessNetns = { pid: '90', startTime: 900, inode: 7 };

    it('a pod whose process runs in the held netns is ok, and later passes re-read that process alone', async () => {
      const h = harness([pod('web', { annotation: 'enabled' })], { scans: [{ 'uid-web': inHeld }], alive: new Set(['40']) });
      assert.deepEqual(await verifyOnly(h), { status: 'ok' });
      assert.deepEqual(await verifyOnly(h), { status: 'ok' });
      assert.equal(h.calls.filter((c) => c === 'scan').length, 1);
    });

    it('a pod running in another netns that carries its IPs is re-enrolled there; the old netns is not read', async () => {
      const h = harness([pod('web', { annotation: 'enabled' })], { scans: [{ 'uid-web': inNew }] });
      const outcome = await verifyOnly(h);
      assert.equal(outcome.status, 'drift');
      if (outcome.status !== 'drift') return;
      assert.deepEqual(
        outcome.drift.map((d) => d.kind),
        ['netns_replaced'],
      );
      assert.match(outcome.drift[0]?.detail ?? '', /inode 1\b.*inode 7/);
      await outcome.repair?.();
      assert.deepEqual(h.calls, ['scan', 'scan', 'carries 7 10.0.0.5', 'replace web 10.0.0.5'], 'a fresh scan confirms it');
    });

    it('a netns that carries none of the pod IPs in the API is reported, never enrolled', async () => {
      const h = harness([pod('web', { annotation: 'enabled' })], { scans: [{ 'uid-web': inNew }], carries: false });
      const outcome = await verifyOnly(h);
      assert.equal(outcome.status, 'drift');
      if (outcome.status !== 'drift') return;
      assert.equal(outcome.repair, undefined);
      assert.match(outcome.drift[0]?.detail ?? '', /carries none of its IPs in the API \(10\.0\.0\.5\)/);
    });

    it('a shared scan older than an ADD is not trusted: a fresh one finds the pod in the held netns', async () => {
      const h = harness([pod('web', { annotation: 'enabled' })], { scans: [{ 'uid-web': inNew }, { 'uid-web': inHeld }] });
      assert.deepEqual(await verifyOnly(h), { status: 'ok' });
    });

    it('no process of the pod on the node (between two sandboxes) is not drift: the held netns is checked', async () => {
      const h = harness([pod('web', { annotation: 'enabled' })], { scans: [{}] });
      assert.deepEqual(await verifyOnly(h), { status: 'ok' });
      assert.deepEqual(h.calls, ['scan', 'inspect /fake/netns', 'list']);
    });
  });

  it('a failing inspection is unverifiable', async () => {
    const h = harness([pod('web', { annotation: 'enabled' })], { inspectError: 'nft: permission denied' });
    assert.deepEqual(await verifyOnly(h), { status: 'unverifiable', error: 'nft: permission denied' });
  });
});

it('the host probe rules are a target of every pass: drift host_rules, repaired as at start-up; a failed read unverifiable', async () => {
  assert.ok(
    !harness([])
      .verifier.targets()
      .some((t) => t.scope === 'node'),
    'no host rules access: no node target',
  );
  const { verifier, calls } = harness([pod('web', { labels: ambientLabels })], {
    hostRules: ['missing chain inet istio-ambient-nat postrouting'],
  });
  const targets = verifier.targets();
  assert.deepEqual(targets[0], { key: 'ambient/node/host-probe-rules', pod: 'host probe rules', scope: 'node' });
  assert.equal(targets.length, 2);
  const outcome = await verifier.verify(targets[0] as (typeof targets)[0]);
  assert.equal(outcome.status, 'drift');
  if (outcome.status !== 'drift') return;
  assert.deepEqual(outcome.drift, [{ kind: 'host_rules', detail: 'missing chain inet istio-ambient-nat postrouting' }]);
  await outcome.repair?.();
  assert.deepEqual(calls, ['host verify', 'host repair']);
  const clean = harness([], { hostRules: [] });
  assert.deepEqual(await clean.verifier.verify(clean.verifier.targets()[0] as (typeof targets)[0]), { status: 'ok' });
  const broken = harness([], { hostRules: new Error('iptables-save: exit code 4') });
  assert.deepEqual(await broken.verifier.verify(broken.verifier.targets()[0] as (typeof targets)[0]), {
    status: 'unverifiable',
    error: 'iptables-save: exit code 4',
  });
});
