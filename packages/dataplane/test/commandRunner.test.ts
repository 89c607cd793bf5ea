import assert from 'node:assert/strict';
import { test } from 'node:test';
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
