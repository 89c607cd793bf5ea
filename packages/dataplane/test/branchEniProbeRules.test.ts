import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CommandError,
  createBranchEniProbeRules,
  createRecordingCommandRunner,
  iifRulesByTable,
  matchBranchEniRoute,
  parseHostRoutes,
  parseIifRules,
  parsePodAddress,
  planBranchEniRules,
  type RecordedCall,
} from '@istio-cni/dataplane';

// aws-vpc-cni on an SGP node: branch ENI pod 10.0.5.7 in table 101 (VLAN 1), its host veth and the
// VLAN link each with an iif rule at priority 10; regular pod 10.0.9.9 with a `to` rule into main.
const RULES_V4 = JSON.stringify([
  { priority: 0, src: 'all', table: '255' },
  { priority: 10, src: 'all', iif: 'vlan.eth.1', table: '101' },
  { priority: 10, src: 'all', iif: 'vlan6fb1c5f2a4d', table: '101' },
  { priority: 512, dst: '10.0.9.9', table: '254' },
  { priority: 1024, src: 'all', fwmark: '0x80/0x80', table: '254' },
  { priority: 32766, src: 'all', table: '254' },
  { priority: 32767, src: 'all', table: '253' },
]);
const TABLE_101 = JSON.stringify([
  { dst: 'default', gateway: '10.0.0.1', dev: 'vlan.eth.1', flags: [] },
  { dst: '10.0.0.1', dev: 'vlan.eth.1', scope: '253', flags: [] },
  { dst: '10.0.5.7', dev: 'vlan6fb1c5f2a4d', scope: '253', flags: [] },
]);

const exists = (argv: readonly string[]) =>
  new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv, exitCode: 2, stdout: '', stderr: 'RTNETLINK answers: File exists\n' });
const failed = (argv: readonly string[], stderr: string) =>
  new CommandError('ERR_DATAPLANE_COMMAND_FAILED', { argv, exitCode: 2, stdout: '', stderr });

/** A host as `ip` and procfs show it; `answer` overrides single commands (by argv text). */
function host(options: { earlyDemux?: string; rules?: string; answer?: (line: string, call: RecordedCall) => Error | undefined } = {}) {
  const runner = createRecordingCommandRunner((call) => {
    const line = call.argv.join(' ');
    const override = options.answer?.(line, call);
    if (override !== undefined) return override;
    if (call.argv[0] === 'cat') return { stdout: `${options.earlyDemux ?? '0'}\n`, stderr: '' };
    if (line === 'ip -N -j -4 rule show') return { stdout: options.rules ?? RULES_V4, stderr: '' };
    if (line === 'ip -N -j -4 route show table 101') return { stdout: TABLE_101, stderr: '' };
    if (line.startsWith('ip -N -j')) return { stdout: '[]', stderr: '' };
    return undefined;
  });
  const logged: string[] = [];
  const rules = createBranchEniProbeRules({
    runner,
    hostProcDir: '/host/proc',
    netns: '/host/proc/1/ns/net',
    log: (level, msg) => logged.push(`${level} ${msg}`),
  });
  const changes = () => runner.lines().filter((l) => / rule (add|del) /.test(l));
  return { runner, rules, logged, changes };
}

describe('branch ENI detection from ip rule and route listings', () => {
  it('finds the table, host veth and iif priority of a branch ENI pod, and nothing for a regular pod', () => {
    const byTable = iifRulesByTable(parseIifRules(RULES_V4));
    assert.deepEqual([...byTable.keys()], [101]);
    const routes = parseHostRoutes(TABLE_101);
    const rules101 = byTable.get(101) ?? [];
    assert.deepEqual(matchBranchEniRoute(parsePodAddress('10.0.5.7'), 101, rules101, routes), {
      table: 101,
      veth: 'vlan6fb1c5f2a4d',
      iifPriority: 10,
    });
    assert.equal(matchBranchEniRoute(parsePodAddress('10.0.9.9'), 101, rules101, routes), undefined);
  });

  it('leaves out iif rules into main, local and table 0, takes table names, and keeps table default as upstream does', () => {
    const rules = parseIifRules(
      JSON.stringify([
        { priority: 5, iif: 'a', table: 'main' },
        { priority: 6, iif: 'b', table: '255' },
        { priority: 7, iif: 'c', table: '0' },
        { priority: 8, iif: 'd', table: 'default' },
        { priority: 9, iif: 'e', table: '300' },
        { priority: 9, iif: 'f', table: 'custom-name' },
      ]),
    );
    assert.deepEqual([...iifRulesByTable(rules).keys()], [253, 300]);
  });

  it('drops interface names that could not be a plain Linux name before they reach an argv', () => {
    const rules = parseIifRules(
      JSON.stringify([
        { priority: 10, iif: '-help', table: '101' },
        { priority: 10, iif: 'a b', table: '101' },
        { priority: 10, iif: 'sixteen-chars-xx', table: '101' },
        { priority: 10, iif: 'ok.1', table: '101' },
      ]),
    );
    assert.deepEqual(
      rules.map((r) => r.iif),
      ['ok.1'],
    );
    const routes = parseHostRoutes(JSON.stringify([{ dst: '10.0.5.7', dev: 'x/../y' }]));
    assert.deepEqual(routes, []);
  });

  it('counts only full-length destinations as host routes, IPv4 and IPv6', () => {
    const routes = parseHostRoutes(
      JSON.stringify([
        { dst: '10.0.5.0/24', dev: 'v1' },
        { dst: '10.0.5.7/32', dev: 'v2' },
        { dst: '10.0.5.8', dev: 'v3' },
        { dst: 'fd00::7', dev: 'v4' },
        { dst: 'fd00::8/64', dev: 'v5' },
        { dst: 'default', dev: 'v6' },
        { dst: '10.0.5.9', nexthops: [{ dev: 'v7' }] },
      ]),
    );
    assert.deepEqual(
      routes.map((r) => `${r.address} ${r.dev}`),
      ['10.0.5.7 v2', '10.0.5.8 v3', 'fd00::7 v4'],
    );
  });

  it('rejects output that is not an ip JSON listing', () => {
    assert.throws(() => parseIifRules('{"priority":1}'), /expected a JSON array/);
    assert.throws(() => parseHostRoutes('Error: ipv4: FIB table does not exist.'));
  });
});

describe('branch ENI rule plan', () => {
  it('routes to the pod through its table at priority 512 and delivers from its veth locally just before aws-vpc-cni', () => {
    const plan = planBranchEniRules(parsePodAddress('10.0.5.7'), { table: 101, veth: 'vlan6fb1c5f2a4d', iifPriority: 10 });
    assert.deepEqual(plan.forward, ['to', '10.0.5.7/32', 'lookup', '101', 'priority', '512']);
    assert.deepEqual(plan.return, ['iif', 'vlan6fb1c5f2a4d', 'lookup', '255', 'priority', '9']);
  });

  it('uses /128 for IPv6 and never a priority below 0', () => {
    const plan = planBranchEniRules(parsePodAddress('fd00::7'), { table: 7, veth: 'v', iifPriority: 0 });
    assert.deepEqual(plan.forward, ['to', 'fd00::7/128', 'lookup', '7', 'priority', '512']);
    assert.deepEqual(plan.return, ['iif', 'v', 'lookup', '255', 'priority', '0']);
  });
});

describe('branch ENI probe rules on the host', () => {
  it('adds both rules in the host netns for a branch ENI pod and removes them from memory on removal', async () => {
    const h = host();
    const added = await h.rules.addPod(['10.0.5.7']);
    assert.deepEqual(added, [{ ip: '10.0.5.7', route: { table: 101, veth: 'vlan6fb1c5f2a4d', iifPriority: 10 } }]);
    assert.deepEqual(h.changes(), [
      'ip -4 rule add to 10.0.5.7/32 lookup 101 priority 512',
      'ip -4 rule add iif vlan6fb1c5f2a4d lookup 255 priority 9',
    ]);
    assert.ok(h.runner.calls.every((c) => c.options.netns === '/host/proc/1/ns/net'));
    assert.ok(h.runner.lines().includes('cat /host/proc/sys/net/ipv4/tcp_early_demux'));

    // aws-vpc-cni has torn its rules down already: removal does not depend on detecting again.
    const before = h.runner.calls.length;
    const removed = await h.rules.removePod(['10.0.5.7']);
    assert.equal(removed.length, 1);
    assert.deepEqual(h.runner.lines().slice(before), [
      'ip -4 rule del to 10.0.5.7/32 lookup 101 priority 512',
      'ip -4 rule del iif vlan6fb1c5f2a4d lookup 255 priority 9',
    ]);
    assert.deepEqual(await h.rules.removePod(['10.0.5.7']), [], 'forgotten once removed');
  });

  it('adds nothing for a regular pod', async () => {
    const h = host();
    assert.deepEqual(await h.rules.addPod(['10.0.9.9']), []);
    assert.deepEqual(await h.rules.removePod(['10.0.9.9']), []);
    assert.deepEqual(h.changes(), []);
  });

  it('is inert unless tcp_early_demux is 0, reading it once', async () => {
    const h = host({ earlyDemux: '1' });
    assert.deepEqual(await h.rules.addPod(['10.0.5.7']), []);
    assert.deepEqual(await h.rules.addPod(['10.0.5.7']), []);
    assert.deepEqual(h.runner.lines(), ['cat /host/proc/sys/net/ipv4/tcp_early_demux']);

    const unreadable = host({ answer: (line) => (line.startsWith('cat ') ? failed(['cat'], 'No such file or directory') : undefined) });
    assert.deepEqual(await unreadable.rules.addPod(['10.0.5.7']), []);
    assert.deepEqual(unreadable.changes(), []);
  });

  it('takes rules that already exist as added (a retried enrolment, an agent restart)', async () => {
    const h = host({ answer: (line, call) => (line.includes(' rule add ') ? exists(call.argv) : undefined) });
    const [outcome] = await h.rules.addPod(['10.0.5.7']);
    assert.equal(outcome?.error, undefined);
    assert.equal((await h.rules.flush()).length, 1, 'remembered for clean-up');
  });

  it('rolls the forward rule back when the return rule cannot be added, and does not remember the IP', async () => {
    const h = host({
      answer: (line, call) => (line.includes('rule add iif') ? failed(call.argv, 'RTNETLINK answers: Operation not permitted') : undefined),
    });
    const [outcome] = await h.rules.addPod(['10.0.5.7']);
    assert.match(outcome?.error ?? '', /failed to add return ip rule for branch ENI veth vlan6fb1c5f2a4d: .*Operation not permitted/);
    assert.deepEqual(h.changes(), [
      'ip -4 rule add to 10.0.5.7/32 lookup 101 priority 512',
      'ip -4 rule add iif vlan6fb1c5f2a4d lookup 255 priority 9',
      'ip -4 rule del to 10.0.5.7/32 lookup 101 priority 512',
    ]);
    assert.deepEqual(await h.rules.removePod(['10.0.5.7']), []);
  });

  it('does not roll back a forward rule it did not add', async () => {
    const h = host({
      answer: (line, call) => {
        if (line.includes('rule add to')) return exists(call.argv);
        if (line.includes('rule add iif')) return failed(call.argv, 'RTNETLINK answers: No buffer space available');
        return undefined;
      },
    });
    const [outcome] = await h.rules.addPod(['10.0.5.7']);
    assert.ok(outcome?.error);
    assert.ok(!h.changes().some((l) => l.includes(' del ')));
  });

  it('flush removes every remembered IP once; removal failures are reported, not thrown', async () => {
    const h = host({
      answer: (line, call) => (line.includes(' rule del iif') ? failed(call.argv, 'No such file or directory') : undefined),
    });
    await h.rules.addPod(['10.0.5.7']);
    const flushed = await h.rules.flush();
    assert.equal(flushed.length, 1);
    assert.match(flushed[0]?.error ?? '', /No such file or directory/);
    assert.deepEqual(await h.rules.flush(), []);
  });

  it('looks in IPv6 rules and tables for an IPv6 pod IP and skips text that is not an IP', async () => {
    const runner = createRecordingCommandRunner((call) => {
      const line = call.argv.join(' ');
      if (call.argv[0] === 'cat') return { stdout: '0', stderr: '' };
      if (line === 'ip -N -j -6 rule show') return { stdout: JSON.stringify([{ priority: 20, iif: 'vlanabc', table: '102' }]), stderr: '' };
      if (line === 'ip -N -j -6 route show table 102') return { stdout: JSON.stringify([{ dst: 'fd00::7', dev: 'vlanabc' }]), stderr: '' };
      return { stdout: '[]', stderr: '' };
    });
    const rules = createBranchEniProbeRules({ runner, hostProcDir: '/proc' });
    assert.deepEqual(await rules.addPod(['not-an-ip', 'fd00::7']), [
      { ip: 'fd00::7', route: { table: 102, veth: 'vlanabc', iifPriority: 20 } },
    ]);
    assert.deepEqual(
      runner.lines().filter((l) => l.includes(' rule add ')),
      ['ip -6 rule add to fd00::7/128 lookup 102 priority 512', 'ip -6 rule add iif vlanabc lookup 255 priority 19'],
    );
    assert.ok(runner.calls.every((c) => c.options.netns === undefined));
  });
});
