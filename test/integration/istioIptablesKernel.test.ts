import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { after, test } from 'node:test';
import { createExecCommandRunner, createScratchNetnsOpener } from '@istio-cni/dataplane';
import type { ScratchNetns } from '@istio-cni/dataplane';
import { runCommand } from '../../packages/install-cni/test/istioIptablesHarness.ts';
import { kernelSkip } from '../support/hostTools.ts';

/** Real kernel, root only: the command applies, is idempotent, refuses drift and reconciles it. */

const skip = kernelSkip;
const opened: ScratchNetns[] = [];
after(async () => {
  for (const ns of opened) await ns.close();
});

async function scratchNetns(): Promise<string> {
  const ns = await createScratchNetnsOpener()();
  opened.push(ns);
  return ns.path;
}

const env = { ENABLE_INBOUND_IPV6: 'false', PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin' };

function realRun(args: readonly string[]) {
  return runCommand(args, { env, runner: createExecCommandRunner({ env }) });
}

function save(netns: string): string {
  return execFileSync('nsenter', [`--net=${netns}`, 'iptables-nft-save', '-t', 'nat'], { encoding: 'utf8' });
}

test('iptables-nft: apply, re-apply unchanged, drift refused, --reconcile converges', { skip }, async () => {
  const netns = await scratchNetns();
  const base = ['--netns', netns, '--iptables-version', 'nft', '-i', '*'];
  const first = await realRun([...base, '-b', '*']);
  assert.equal(first.exitCode, 0, first.stderr);
  assert.match(save(netns), /-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT/);
  assert.match(first.stderr, /ipv4 applied/);

  const again = await realRun([...base, '-b', '*']);
  assert.equal(again.exitCode, 0, again.stderr);
  assert.match(again.stderr, /ipv4 unchanged/);

  const drift = await realRun([...base, '-b', '8080']);
  assert.equal(drift.exitCode, 1);
  assert.match(drift.stderr, /reconcile/);
  assert.doesNotMatch(save(netns), /--dport 8080/, 'a refused apply changes nothing');

  const reconciled = await realRun([...base, '-b', '8080', '--reconcile']);
  assert.equal(reconciled.exitCode, 0, reconciled.stderr);
  const state = save(netns);
  assert.match(state, /-A ISTIO_INBOUND -p tcp -m tcp --dport 8080 -j ISTIO_IN_REDIRECT/);
  assert.doesNotMatch(state, /-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT/);
});

test('nftables: --native-nftables creates the istio-proxy tables in the netns only', { skip }, async () => {
  const netns = await scratchNetns();
  const run = await realRun(['--netns', netns, '--native-nftables', '-b', '*', '-i', '*']);
  assert.equal(run.exitCode, 0, run.stderr);
  const tables = execFileSync('nsenter', [`--net=${netns}`, 'nft', 'list', 'tables'], { encoding: 'utf8' });
  assert.match(tables, /table inet istio-proxy-nat/);
  const again = await realRun(['--netns', netns, '--native-nftables', '-b', '*', '-i', '*']);
  assert.equal(again.exitCode, 0, again.stderr);
  assert.match(again.stderr, /"result":"unchanged"/);
});
