import assert from 'node:assert/strict';
import { existsSync, fstatSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { CommandError, createExecCommandRunner, xtablesExitMessage } from '@istio-cni/dataplane';

test('runs a program with argv and returns its stdout', async () => {
  const runner = createExecCommandRunner();
  const { stdout } = await runner.run(['echo', 'a b', '$HOME;', '`x`']);
  assert.equal(stdout, 'a b $HOME; `x`\n');
});

test('writes stdin to the program', async () => {
  const { stdout } = await createExecCommandRunner().run(['cat'], { stdin: '*nat\nCOMMIT\n' });
  assert.equal(stdout, '*nat\nCOMMIT\n');
});

test('env overrides are merged over the base environment', async () => {
  const runner = createExecCommandRunner({ env: { BASE: 'b', PATH: process.env.PATH ?? '/usr/bin:/bin' } });
  const { stdout } = await runner.run(['env'], { env: { XTABLES_LOCKFILE: '/x' } });
  assert.match(stdout, /^BASE=b$/m);
  assert.match(stdout, /^XTABLES_LOCKFILE=\/x$/m);
});

test('a non-zero exit rejects with exit code and stderr', async () => {
  const err = await createExecCommandRunner()
    .run(['sh', '-c', 'echo boom >&2; exit 3'])
    .catch((e: unknown) => e);
  assert.ok(err instanceof CommandError);
  assert.equal(err.code, 'ERR_DATAPLANE_COMMAND_FAILED');
  assert.equal(err.exitCode, 3);
  assert.equal(err.stderr, 'boom\n');
  assert.match(err.message, /^failed to run "sh -c .*": exit code 3: boom$/);
});

test('a missing program rejects with ERR_DATAPLANE_COMMAND_NOT_FOUND', async () => {
  const err = await createExecCommandRunner()
    .run(['/nonexistent/iptables-restore'])
    .catch((e: unknown) => e);
  assert.ok(err instanceof CommandError);
  assert.equal(err.code, 'ERR_DATAPLANE_COMMAND_NOT_FOUND');
});

test('a command that outlives its timeout is killed and rejects with ERR_DATAPLANE_COMMAND_TIMEOUT', async () => {
  const err = await createExecCommandRunner()
    .run(['sleep', '30'], { timeoutMs: 20 })
    .catch((e: unknown) => e);
  assert.ok(err instanceof CommandError);
  assert.equal(err.code, 'ERR_DATAPLANE_COMMAND_TIMEOUT');
  assert.match(err.message, /timed out after 20 ms/);
});

test('xtables exit codes 1-4 are explained in the message', () => {
  assert.deepEqual([1, 2, 3, 4, 5].map(xtablesExitMessage), [
    'other problem',
    'parameter problem',
    'version problem',
    'resource problem',
    undefined,
  ]);
  const err = new CommandError('ERR_DATAPLANE_COMMAND_FAILED', {
    argv: ['/usr/sbin/ip6tables-restore', '--noflush'],
    netns: '/var/run/netns/pod',
    exitCode: 2,
    stdout: '',
    stderr: 'ip6tables-restore: line 3 failed\n',
  });
  assert.equal(
    err.message,
    'failed to run "/usr/sbin/ip6tables-restore --noflush" in netns "/var/run/netns/pod": exit code 2 (parameter problem): ip6tables-restore: line 3 failed',
  );
});

test('an empty argv is refused', async () => {
  await assert.rejects(createExecCommandRunner().run([]), TypeError);
});

test('output beyond maxOutputBytes is never handed back cut short: the command is stopped and rejects, naming the limit', async () => {
  const runner = createExecCommandRunner({ maxOutputBytes: 4096 });
  const exact = await runner.run(['head', '-c', '4096', '/dev/zero']);
  assert.equal(exact.stdout.length, 4096);
  // `yes` never ends by itself: only the limit stops it.
  const err = await runner.run(['yes', 'ISTIO_OUTPUT -j RETURN']).catch((e: unknown) => e);
  assert.ok(err instanceof CommandError, String(err));
  assert.equal(err.code, 'ERR_DATAPLANE_OUTPUT_TOO_LARGE');
  assert.equal(err.stdout, '');
  assert.match(err.message, /^failed to run "yes ISTIO_OUTPUT -j RETURN": printed more than 4096 bytes; stopped and not read/);
});

test('a long stderr is quoted in the error message up to a bound', async () => {
  const err = await createExecCommandRunner()
    .run(['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" x >&2; exit 1'])
    .catch((e: unknown) => e);
  assert.ok(err instanceof CommandError);
  assert.equal(err.stderr.length, 65536);
  assert.ok(err.message.length < 2300, `message of ${err.message.length} characters`);
  assert.match(err.message, /x… \(65536 characters\)$/);
});

// A stand-in nsenter that prints what it was given: its argv, what its fd 3 is, the lock file.
function fakeNsenter(t: TestContext): { nsenter: string; dir: string } {
  const dir = mkdtempSync(join(tmpdir(), 'fake-nsenter-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const nsenter = join(dir, 'nsenter');
  writeFileSync(nsenter, '#!/bin/sh\necho "$@"\nreadlink /proc/self/fd/3 || echo "no fd 3"\necho "lock=$XTABLES_LOCKFILE"\n', {
    mode: 0o700,
  });
  return { nsenter, dir };
}

test("enterNetnsOwner: a netns of another user namespace is entered with that namespace too, handed over as fd 3, the pod's own lock", async (t) => {
  const { nsenter, dir } = fakeNsenter(t);
  const owner = join(dir, 'userns');
  writeFileSync(owner, '');
  let fd: number | undefined;
  const runner = createExecCommandRunner({
    nsenter,
    netnsOwner: (path) => {
      assert.equal(path, '/var/run/netns/pod');
      fd = openSync(owner, 'r');
      return fd;
    },
  });
  const { stdout } = await runner.run(['iptables-restore', '--noflush'], {
    netns: '/var/run/netns/pod',
    env: { XTABLES_LOCKFILE: '/var/run/netns/pod' },
    enterNetnsOwner: true,
  });
  assert.equal(stdout, `--net=/var/run/netns/pod --user=/proc/self/fd/3 -- iptables-restore --noflush\n${owner}\nlock=/proc/self/fd/3\n`);
  assert.throws(() => fstatSync(fd as number), { code: 'EBADF' }, "the runner's copy of the fd is closed");
});

test("enterNetnsOwner: a netns of the agent's own user namespace, or a command not asking, runs with --net only", async (t) => {
  const { nsenter } = fakeNsenter(t);
  let asked = 0;
  const runner = createExecCommandRunner({
    nsenter,
    netnsOwner: () => {
      asked++;
      return undefined;
    },
  });
  const own = await runner.run(['iptables-restore'], { netns: '/n', env: { XTABLES_LOCKFILE: '/n' }, enterNetnsOwner: true });
  assert.equal(own.stdout, '--net=/n -- iptables-restore\nno fd 3\nlock=/n\n');
  const notAsking = await runner.run(['iptables-save'], { netns: '/n' });
  assert.equal(notAsking.stdout, '--net=/n -- iptables-save\nno fd 3\nlock=\n');
  assert.equal(asked, 1, 'the owner is looked up only for commands that ask');
});

test('enterNetnsOwner: a netns whose owner cannot be told fails the command before anything runs', async (t) => {
  const { nsenter, dir } = fakeNsenter(t);
  const ran = join(dir, 'ran');
  writeFileSync(nsenter, `#!/bin/sh\ntouch ${ran}\n`, { mode: 0o700 });
  const runner = createExecCommandRunner({
    nsenter,
    netnsOwner: () => {
      throw new Error('ENOENT: no such file');
    },
  });
  const err = await runner.run(['iptables-restore'], { netns: '/gone', enterNetnsOwner: true }).catch((e: unknown) => e);
  assert.ok(err instanceof CommandError);
  assert.equal(err.code, 'ERR_DATAPLANE_COMMAND_FAILED');
  assert.match(err.message, /cannot tell which user namespace owns the netns: ENOENT: no such file/);
  assert.equal(existsSync(ran), false);
});
