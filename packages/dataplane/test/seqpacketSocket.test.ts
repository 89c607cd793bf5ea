import assert from 'node:assert/strict';
import { fstatSync, mkdtempSync, openSync, closeSync, rmSync, statSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { connectSeqpacket, listenSeqpacket, SeqpacketError, seqpacketPair, closeFd, duplicateFd } from '@istio-cni/dataplane';

const codeOf = (code: string) => (err: unknown) => err instanceof SeqpacketError && err.code === code;

test('a packet and exactly one fd cross a socket pair; the fd is the same file (same inode)', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => {
    a.close();
    b.close();
  });
  const netns = openSync('/proc/self/ns/net', 'r');
  t.after(() => closeSync(netns));
  const receiving = b.receive({ acceptFds: true, timeoutMs: 5_000 });
  await a.send(Buffer.from('hello'), { fd: netns });
  const got = await receiving;
  assert.equal(got.data.toString(), 'hello');
  assert.equal(got.fds.length, 1);
  assert.equal(fstatSync(got.fds[0] ?? -1).ino, fstatSync(netns).ino);
  assert.notEqual(got.fds[0], netns);
  closeFd(got.fds[0] ?? -1);
});

test('packets keep their boundaries', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => {
    a.close();
    b.close();
  });
  await a.send(Buffer.from('one'));
  await a.send(Buffer.from('two!'));
  assert.equal((await b.receive()).data.toString(), 'one');
  assert.equal((await b.receive()).data.toString(), 'two!');
});

test('receive times out when nothing arrives, and the socket stays usable', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => {
    a.close();
    b.close();
  });
  await assert.rejects(b.receive({ timeoutMs: 20 }), codeOf('ERR_SEQPACKET_TIMEOUT'));
  await a.send(Buffer.from('late'));
  assert.equal((await b.receive({ timeoutMs: 5_000 })).data.toString(), 'late');
});

test('a packet longer than the receive buffer fails with MSG_TRUNC; the next one is fine', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => {
    a.close();
    b.close();
  });
  await a.send(Buffer.alloc(1025, 1));
  await a.send(Buffer.alloc(1024, 2));
  await assert.rejects(b.receive(), (err) => codeOf('ERR_SEQPACKET_TRUNCATED')(err) && /MSG_TRUNC/.test((err as Error).message));
  assert.equal((await b.receive()).data.length, 1024);
});

test('an fd nobody asked for fails the read', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => {
    a.close();
    b.close();
  });
  const netns = openSync('/proc/self/ns/net', 'r');
  t.after(() => closeSync(netns));
  await a.send(Buffer.from('x'), { fd: netns });
  await assert.rejects(b.receive(), (err) => codeOf('ERR_SEQPACKET_TRUNCATED')(err) && /file descriptor/.test((err as Error).message));
});

test('peer close: reads see EOF, writes fail with EPIPE', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => b.close());
  const pending = b.receive({ timeoutMs: 5_000 });
  a.close();
  await assert.rejects(pending, codeOf('ERR_SEQPACKET_EOF'));
  await assert.rejects(
    b.send(Buffer.from('x')),
    (err) => codeOf('ERR_SEQPACKET_SYSCALL')(err) && (err as SeqpacketError).syscallCode === 'EPIPE',
  );
});

test('closing a socket fails its pending read; using it afterwards fails too', async () => {
  const [a, b] = seqpacketPair();
  const pending = b.receive();
  b.close();
  await assert.rejects(pending, codeOf('ERR_SEQPACKET_CLOSED'));
  await assert.rejects(b.send(Buffer.from('x')), codeOf('ERR_SEQPACKET_CLOSED'));
  a.close();
  b.close();
});

test('an aborted read rejects, a second concurrent read is refused', async (t) => {
  const [a, b] = seqpacketPair();
  t.after(() => {
    a.close();
    b.close();
  });
  const abort = new AbortController();
  const first = b.receive({ signal: abort.signal });
  await assert.rejects(b.receive(), codeOf('ERR_SEQPACKET_BUSY'));
  abort.abort();
  await assert.rejects(first, codeOf('ERR_SEQPACKET_ABORTED'));
});

test('listener on a path: replaces a stale file, mode 0600, accepts, removes the file on close', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'seqpacket-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'zds.sock');
  writeFileSync(path, 'stale');
  const listener = listenSeqpacket(path);
  t.after(() => listener.close());
  assert.ok(statSync(path).isSocket());
  assert.equal(statSync(path).mode & 0o777, 0o600);
  const accepting = listener.accept();
  const client = await connectSeqpacket(path);
  const server = await accepting;
  t.after(() => {
    client.close();
    server.close();
  });
  await client.send(Buffer.from('ping'));
  assert.equal((await server.receive({ timeoutMs: 5_000 })).data.toString(), 'ping');
  const next = listener.accept();
  listener.close();
  await assert.rejects(next, codeOf('ERR_SEQPACKET_CLOSED'));
  assert.equal(existsSync(path), false);
});

test('abstract listener (@name) works without a file', async (t) => {
  const name = `@seqpacket-test-${process.pid}`;
  const listener = listenSeqpacket(name);
  t.after(() => listener.close());
  const accepting = listener.accept();
  const client = await connectSeqpacket(name);
  const server = await accepting;
  t.after(() => {
    client.close();
    server.close();
  });
  await server.send(Buffer.from('hi'));
  assert.equal((await client.receive({ timeoutMs: 5_000 })).data.toString(), 'hi');
});

test('connecting to nothing fails with ECONNREFUSED or ENOENT naming the path', async () => {
  await assert.rejects(connectSeqpacket(`@seqpacket-nobody-${process.pid}`), (err) => {
    return (
      codeOf('ERR_SEQPACKET_SYSCALL')(err) &&
      (err as SeqpacketError).syscallCode === 'ECONNREFUSED' &&
      /seqpacket-nobody/.test((err as Error).message)
    );
  });
  await assert.rejects(connectSeqpacket('/nonexistent/dir/zds.sock'), (err) => (err as SeqpacketError).syscallCode === 'ENOENT');
});

test('bad socket paths are refused with the offending value', () => {
  assert.throws(() => listenSeqpacket(''), codeOf('ERR_SEQPACKET_INVALID_ARGUMENT'));
  const long = `/tmp/${'x'.repeat(200)}`;
  assert.throws(
    () => listenSeqpacket(long),
    (err) => codeOf('ERR_SEQPACKET_INVALID_ARGUMENT')(err) && (err as Error).message.includes('xxxx'),
  );
});

test('duplicateFd gives a new number for the same file', (t) => {
  const fd = openSync('/proc/self/ns/net', 'r');
  t.after(() => closeSync(fd));
  const dup = duplicateFd(fd);
  assert.notEqual(dup, fd);
  assert.equal(fstatSync(dup).ino, fstatSync(fd).ino);
  closeFd(dup);
  assert.throws(
    () => duplicateFd(dup),
    (err) => (err as SeqpacketError).syscallCode === 'EBADF',
  );
});
