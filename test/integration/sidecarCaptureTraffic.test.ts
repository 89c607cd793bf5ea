import assert from 'node:assert/strict';
import { test } from 'node:test';
import { applySidecarCapture, createExecCommandRunner, createScratchNetnsOpener, detectIptablesBackend } from '@istio-cni/dataplane';
import { kernelSkip } from '../support/hostTools.ts';
import { createPodNetworkFixture } from '../support/podNetworkFixture.ts';
import { sidecarRulePlan, testCaptureConfig } from '../support/sidecarRulePlan.ts';
import { socketWorkers } from '../support/startSocketWorker.ts';

const backends = [
  { name: 'iptables-nft', rules: 'iptables', force: 'nft' },
  { name: 'iptables-legacy', rules: 'iptables', force: 'legacy' },
  { name: 'nft', rules: 'nft' },
] as const;
const modes = ['REDIRECT', 'TPROXY'] as const;
const APP_UID = 1000;
const PROXY_UID = 1337;

for (const backend of backends) {
  for (const mode of modes) {
    test(`[${backend.name} ${mode}] real traffic is captured as configured`, { skip: kernelSkip, timeout: 120_000 }, async (t) => {
      const net = createPodNetworkFixture(t);
      const runner = createExecCommandRunner();
      const iptablesBackend =
        backend.rules === 'iptables' ? await detectIptablesBackend(runner, { forceBinary: backend.force }) : undefined;
      const result = await applySidecarCapture(
        { runner, openScratchNetns: createScratchNetnsOpener() },
        {
          netns: net.pod.path,
          plan: ({ ipv6 }) => sidecarRulePlan(backend.rules, testCaptureConfig({ mode, ipv6 })),
          tproxyRoutes: mode === 'TPROXY',
          dualStack: true,
          ...(iptablesBackend === undefined ? {} : { iptablesBackend }),
        },
      );
      assert.equal(result.ipv6, true, 'dual-stack pod with a global IPv6 address gets IPv6 rules');

      const start = socketWorkers(t);
      const proxy = await start(net.pod.path);
      const app = await start(net.pod.path, APP_UID);
      const proxyUser = await start(net.pod.path, PROXY_UID);
      const node = await start(net.node.path);

      for (const host of ['0.0.0.0', '::']) {
        await proxy.listen({ proto: 'tcp', host, port: 15001, name: 'outbound' });
        await proxy.listen({ proto: 'tcp', host, port: 15006, name: 'inbound', transparent: mode === 'TPROXY' });
        await proxy.listen({ proto: 'tcp', host, port: 15053, name: 'dns-tcp' });
        await proxy.listen({ proto: 'udp', host, port: 15053, name: 'dns-udp' });
        await proxy.listen({ proto: 'tcp', host, port: 8080, name: 'app' });
        await proxy.listen({ proto: 'tcp', host, port: 9002, name: 'app-excluded-port' });
      }
      for (const host of [net.node.ipv4, net.node.ipv6]) {
        await node.listen({ proto: 'tcp', host, port: 8000, name: 'node' });
        await node.listen({ proto: 'tcp', host, port: 9001, name: 'node-excluded-port' });
      }
      await node.listen({ proto: 'tcp', host: net.farIpv4, port: 8000, name: 'node-far' });
      await node.listen({ proto: 'tcp', host: net.farIpv6, port: 8000, name: 'node-far' });

      const families = [
        { family: 'IPv4', nodeIp: net.node.ipv4, podIp: net.pod.ipv4, farIp: net.farIpv4 },
        { family: 'IPv6', nodeIp: net.node.ipv6, podIp: net.pod.ipv6, farIp: net.farIpv6 },
      ];
      for (const { family, nodeIp, podIp, farIp } of families) {
        await t.test(`${family}: an app connection to the outside lands on 15001 with its original destination`, async () => {
          const landed = await app.connect({ proto: 'tcp', host: nodeIp, port: 8000 });
          assert.equal(landed.listener, 'outbound');
          assert.deepEqual(landed.originalDst, { address: nodeIp, port: 8000 });
        });
        await t.test(`${family}: the proxy's own uid is not captured`, async () => {
          assert.equal((await proxyUser.connect({ proto: 'tcp', host: nodeIp, port: 8000 })).listener, 'node');
        });
        await t.test(`${family}: inbound connections to an app port land on 15006`, async () => {
          const landed = await node.connect({ proto: 'tcp', host: podIp, port: 8080 });
          assert.equal(landed.listener, 'inbound');
          if (mode === 'TPROXY') {
            assert.deepEqual(landed.local, { address: podIp, port: 8080 }, 'TPROXY keeps the original destination as local address');
          } else {
            assert.deepEqual(landed.originalDst, { address: podIp, port: 8080 });
          }
        });
        await t.test(`${family}: an excluded inbound port reaches the app directly`, async () => {
          assert.equal((await node.connect({ proto: 'tcp', host: podIp, port: 9002 })).listener, 'app-excluded-port');
        });
        await t.test(`${family}: an excluded outbound port is not captured`, async () => {
          assert.equal((await app.connect({ proto: 'tcp', host: nodeIp, port: 9001 })).listener, 'node-excluded-port');
        });
        await t.test(`${family}: an excluded outbound CIDR is not captured`, async () => {
          assert.equal((await app.connect({ proto: 'tcp', host: farIp, port: 8000 })).listener, 'node-far');
        });
        await t.test(`${family}: DNS over UDP and TCP lands on 15053`, async () => {
          assert.equal((await app.connect({ proto: 'udp', host: nodeIp, port: 53 })).listener, 'dns-udp');
          assert.equal((await app.connect({ proto: 'tcp', host: nodeIp, port: 53 })).listener, 'dns-tcp');
        });
      }
    });
  }
}
