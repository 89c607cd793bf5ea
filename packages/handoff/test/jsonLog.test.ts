import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createJsonLogger, parseLogThreshold } from '@istio-cni/handoff';

describe('createJsonLogger', () => {
  const fixed = new Date('2026-01-02T03:04:05.678Z');

  it('writes one JSON line per event with level, time, scope, msg and fields', () => {
    const lines: string[] = [];
    const log = createJsonLogger({ scope: 'cni-plugin', sink: (l) => lines.push(l), now: () => fixed });
    log.with({ pod: 'ns/p' }).info('hello', { n: 1, err: new Error('boom') });
    assert.equal(lines.length, 1);
    assert.deepEqual(JSON.parse(lines[0] ?? ''), {
      level: 'info',
      time: '2026-01-02T03:04:05.678Z',
      scope: 'cni-plugin',
      msg: 'hello',
      pod: 'ns/p',
      n: 1,
      err: 'boom',
    });
  });

  it('drops events below the threshold and follows threshold changes', () => {
    const lines: string[] = [];
    const log = createJsonLogger({ scope: 's', threshold: 'warn', sink: (l) => lines.push(l) });
    log.info('dropped');
    log.warn('kept');
    log.setThreshold('none');
    log.error('dropped too');
    assert.deepEqual(
      lines.map((l) => JSON.parse(l).msg),
      ['kept'],
    );
  });

  it('parses thresholds leniently with a fallback', () => {
    assert.equal(parseLogThreshold('DEBUG'), 'debug');
    assert.equal(parseLogThreshold('warning'), 'warn');
    assert.equal(parseLogThreshold(''), 'info');
    assert.equal(parseLogThreshold('verbose', 'error'), 'error');
  });
});
