import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createRecordingCommandRunner } from '@istio-cni/dataplane';

test('records every call and answers with empty success by default', async () => {
  const runner = createRecordingCommandRunner();
  assert.deepEqual(await runner.run(['iptables-save'], { netns: '/n' }), { stdout: '', stderr: '' });
  await runner.run(['iptables-restore', '--noflush'], { stdin: '* nat\n-N ISTIO_INBOUND\nCOMMIT\n' });
  assert.equal(runner.calls.length, 2);
  assert.equal(runner.calls[0]?.options.netns, '/n');
  assert.deepEqual(runner.lines(), ['iptables-save', 'iptables-restore --noflush', '* nat', '-N ISTIO_INBOUND', 'COMMIT']);
});

test('the responder decides outputs and failures', async () => {
  const runner = createRecordingCommandRunner(({ argv }) =>
    argv[0] === 'fail' ? new Error('nope') : { stdout: argv.join(','), stderr: '' },
  );
  assert.equal((await runner.run(['a', 'b'])).stdout, 'a,b');
  await assert.rejects(runner.run(['fail']), /nope/);
  assert.equal(runner.calls.length, 2);
});
