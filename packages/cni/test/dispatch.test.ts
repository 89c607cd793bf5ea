import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CniError, dispatch, ErrorCode, LATEST_VERSION, requiredEnv, SUPPORTED_VERSIONS, versionAtLeast } from '@istio-cni/cni';
import { fakePlugin } from './fakePlugin.ts';

const ENV = {
  CNI_CONTAINERID: 'c0ffee',
  CNI_NETNS: '/var/run/netns/x',
  CNI_IFNAME: 'eth0',
  CNI_PATH: '/opt/cni/bin:/usr/lib/cni',
  CNI_ARGS: 'K8S_POD_NAME=a',
};
const conf = (v: string, extra: Record<string, unknown> = {}) =>
  Buffer.from(JSON.stringify({ cniVersion: v, name: 'net', type: 'istio-cni', ...extra }));
const error = (stdout: string) => JSON.parse(stdout) as Record<string, unknown>;

describe('environment per command', () => {
  const TABLE: Record<string, string[]> = {
    ADD: ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
    CHECK: ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'],
    DEL: ['CNI_COMMAND', 'CNI_CONTAINERID', 'CNI_IFNAME', 'CNI_PATH'],
    GC: ['CNI_COMMAND', 'CNI_PATH'],
    STATUS: ['CNI_COMMAND', 'CNI_PATH'],
    VERSION: ['CNI_COMMAND'],
  };
  for (const [command, vars] of Object.entries(TABLE)) {
    it(`${command} requires ${vars.join(', ')}`, () => assert.deepEqual(requiredEnv(command), vars));
    it(`${command} reports all missing variables at once`, async () => {
      const out = await dispatch({ CNI_COMMAND: command }, conf('1.1.0'), fakePlugin(), 'about');
      if (vars.length === 1) {
        assert.equal(out.exitCode, 0);
        return;
      }
      assert.equal(out.exitCode, 1);
      assert.deepEqual(error(out.stdout), {
        cniVersion: '1.1.0',
        code: 4,
        msg: `required env variables [${vars.slice(1).join(',')}] missing`,
      });
    });
  }

  it('DEL runs without CNI_NETNS, GC and STATUS without container and interface', async () => {
    const p = fakePlugin();
    const env = { CNI_PATH: '/opt' };
    assert.equal(
      (await dispatch({ ...env, CNI_COMMAND: 'DEL', CNI_CONTAINERID: 'a', CNI_IFNAME: 'eth0' }, conf('1.1.0'), p, '')).exitCode,
      0,
    );
    assert.equal((await dispatch({ ...env, CNI_COMMAND: 'GC' }, conf('1.1.0'), p, '')).exitCode, 0);
    assert.equal((await dispatch({ ...env, CNI_COMMAND: 'STATUS' }, conf('1.1.0'), p, '')).exitCode, 0);
    assert.deepEqual(p.calls, { add: 0, del: 1, check: 0, gc: 1, status: 1 });
  });

  it('validates the container ID before noticing later missing variables', async () => {
    const out = await dispatch({ CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'a b' }, conf('1.0.0'), fakePlugin(), '');
    assert.deepEqual(error(out.stdout), { cniVersion: '1.0.0', code: 4, msg: 'invalid characters in containerID', details: 'a b' });
  });

  it('does not validate container ID or interface for commands that do not need them', async () => {
    const out = await dispatch(
      { CNI_COMMAND: 'GC', CNI_PATH: '/x', CNI_CONTAINERID: '$$', CNI_IFNAME: 'a/b' },
      conf('1.1.0'),
      fakePlugin(),
      '',
    );
    assert.equal(out.exitCode, 0);
  });

  it('prints the about text and versions when CNI_COMMAND is unset', async () => {
    const out = await dispatch({}, Buffer.alloc(0), fakePlugin(), 'CNI plugin istio-cni 1.0');
    assert.deepEqual(out, {
      stdout: '',
      stderr: `CNI plugin istio-cni 1.0\nCNI protocol versions supported: ${SUPPORTED_VERSIONS.join(', ')}\n`,
      exitCode: 0,
    });
  });

  it('reports CNI_COMMAND missing when there is no about text', async () => {
    const out = await dispatch({}, Buffer.alloc(0), fakePlugin(), '');
    assert.equal(error(out.stdout)['msg'], 'required env variables [CNI_COMMAND] missing');
  });

  it('passes the environment to handlers', async () => {
    const p = fakePlugin();
    await dispatch({ ...ENV, CNI_COMMAND: 'ADD' }, conf('1.0.0', { extra: { a: 1 } }), p, '');
    const seen = p.seen[0];
    assert.ok(seen);
    assert.equal(seen.args.command, 'ADD');
    assert.equal(seen.args.containerId, 'c0ffee');
    assert.deepEqual(seen.args.path, ['/opt/cni/bin', '/usr/lib/cni']);
    assert.equal(seen.args.args, 'K8S_POD_NAME=a');
    assert.equal(seen.conf.name, 'net');
    assert.deepEqual(seen.conf.raw['extra'], { a: 1 });
  });
});

describe('version gates', () => {
  for (const v of SUPPORTED_VERSIONS) {
    for (const [command, min] of [
      ['CHECK', '0.4.0'],
      ['GC', '1.1.0'],
      ['STATUS', '1.1.0'],
    ] as const) {
      const allowed = versionAtLeast(v, min);
      it(`[${v}] ${command} is ${allowed ? 'allowed' : 'refused'}`, async () => {
        const p = fakePlugin();
        const out = await dispatch({ ...ENV, CNI_COMMAND: command }, conf(v), p, '');
        if (allowed) {
          assert.equal(out.exitCode, 0, out.stdout);
          assert.equal(out.stdout, '');
        } else {
          assert.deepEqual(error(out.stdout), { cniVersion: v, code: 1, msg: `config version does not allow ${command}` });
        }
      });
    }
    it(`[${v}] ADD and DEL run`, async () => {
      const p = fakePlugin({ cniVersion: v });
      assert.equal((await dispatch({ ...ENV, CNI_COMMAND: 'ADD' }, conf(v), p, '')).exitCode, 0);
      assert.equal((await dispatch({ ...ENV, CNI_COMMAND: 'DEL' }, conf(v), p, '')).exitCode, 0);
      assert.deepEqual([p.calls.add, p.calls.del], [1, 1]);
    });
  }

  it('an absent cniVersion means 0.1.0', async () => {
    const out = await dispatch({ ...ENV, CNI_COMMAND: 'CHECK' }, Buffer.from('{"name":"n"}'), fakePlugin(), '');
    assert.deepEqual(error(out.stdout), { cniVersion: '0.1.0', code: 1, msg: 'config version does not allow CHECK' });
  });

  it('details name the config and the supported versions', async () => {
    const out = await dispatch({ ...ENV, CNI_COMMAND: 'ADD' }, conf('0.5.0'), fakePlugin(), '');
    assert.equal(
      error(out.stdout)['details'],
      'config is "0.5.0", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" "0.4.0" "1.0.0" "1.1.0"]',
    );
  });
});

describe('output framing', () => {
  it('VERSION ignores stdin and answers compact JSON with a newline', async () => {
    const out = await dispatch({ CNI_COMMAND: 'VERSION' }, Buffer.from('garbage'), fakePlugin(), '');
    assert.equal(out.stdout, `{"cniVersion":"${LATEST_VERSION}","supportedVersions":${JSON.stringify(SUPPORTED_VERSIONS)}}\n`);
  });

  it('ADD prints the result like json.MarshalIndent, without trailing newline, escaping <>&', async () => {
    const out = await dispatch(
      { ...ENV, CNI_COMMAND: 'ADD' },
      conf('1.0.0'),
      fakePlugin({ cniVersion: '1.0.0', dns: { domain: 'a<b>&c' }, ips: [] }),
      '',
    );
    assert.equal(
      out.stdout,
      '{\n    "cniVersion": "1.0.0",\n    "dns": {\n        "domain": "a\\u003cb\\u003e\\u0026c"\n    },\n    "ips": []\n}',
    );
  });

  it('a thrown CniError keeps its code and details', async () => {
    const p = fakePlugin();
    p.failWith = new CniError(ErrorCode.TryAgainLater, 'busy', 'agent not ready');
    const out = await dispatch({ ...ENV, CNI_COMMAND: 'ADD' }, conf('0.4.0'), p, '');
    assert.equal(out.stdout, '{\n    "cniVersion": "0.4.0",\n    "code": 11,\n    "msg": "busy",\n    "details": "agent not ready"\n}');
    assert.equal(out.exitCode, 1);
  });

  it('any other thrown value becomes code 999 with the message only', async () => {
    for (const thrown of [new TypeError('boom'), 'plain string', 42]) {
      const p = fakePlugin();
      p.failWith = thrown;
      const out = await dispatch({ ...ENV, CNI_COMMAND: 'DEL' }, conf('1.1.0'), p, '');
      const err = error(out.stdout);
      assert.equal(err['code'], 999);
      assert.equal(err['msg'], thrown instanceof Error ? 'boom' : String(thrown));
      assert.doesNotMatch(out.stdout, /at .*\.ts/);
    }
  });

  it('refuses ADD into the plugin netns when the check is injected, unless overridden', async () => {
    const options = { isPluginNetns: (ns: string) => ns === '/proc/self/ns/net' };
    const env = { ...ENV, CNI_COMMAND: 'ADD', CNI_NETNS: '/proc/self/ns/net' };
    const out = await dispatch(env, conf('1.0.0'), fakePlugin(), '', options);
    assert.deepEqual(error(out.stdout), {
      cniVersion: '1.0.0',
      code: 8,
      msg: "plugin's netns and netns from CNI_NETNS should not be the same",
    });
    assert.equal((await dispatch({ ...env, CNI_NETNS_OVERRIDE: 'true' }, conf('1.0.0'), fakePlugin(), '', options)).exitCode, 0);
    assert.equal((await dispatch({ ...env, CNI_NETNS: '/var/run/netns/pod' }, conf('1.0.0'), fakePlugin(), '', options)).exitCode, 0);
  });

  it('hands the parsed prevResult to ADD', async () => {
    const p = fakePlugin();
    const prevResult = { cniVersion: '0.3.1', ips: [{ version: '4', address: '10.0.0.2/24' }] };
    await dispatch({ ...ENV, CNI_COMMAND: 'ADD' }, conf('0.3.1', { prevResult }), p, '');
    assert.deepEqual(p.seen[0]?.conf.prevResult?.ips, [{ address: '10.0.0.2/24' }]);
  });
});
