import { openSync, closeSync, fstatSync } from 'node:fs';
import { getHeapStatistics } from 'node:v8';
import { Command } from 'commander';

/**
 * Proves the native pieces work in this executable: koffi loads, and a file descriptor crosses a
 * SOCK_SEQPACKET pair as SCM_RIGHTS (what ZDS does with pod network namespaces). The build runs
 * it on the finished executable; operators can run it on a node.
 */
export async function checkRuntime(): Promise<string> {
  // Loaded on use: the daemon's start does not need the dataplane.
  const { closeFd, seqpacketPair } = await import('@istio-cni/dataplane');
  const [a, b] = seqpacketPair();
  const file = openSync('/proc/self/ns/net', 'r');
  try {
    await a.send(Buffer.from('check'), { fd: file, timeoutMs: 2_000 });
    const got = await b.receive({ timeoutMs: 2_000, acceptFds: true });
    const [fd] = got.fds;
    if (fd === undefined) throw new Error('no file descriptor arrived with the packet');
    try {
      if (fstatSync(fd).ino !== fstatSync(file).ino) throw new Error('received descriptor refers to another file');
    } finally {
      closeFd(fd);
    }
    return 'seqpacket + SCM_RIGHTS ok';
  } finally {
    closeSync(file);
    a.close();
    b.close();
  }
}

export function checkRuntimeCommand(): Command {
  return new Command('check-runtime')
    .description('verify the native socket support (SOCK_SEQPACKET with fd passing) used for ztunnel')
    .action(async () => {
      // The runtime flags the executable embeds (sea-config execArgv), for the build's check and
      // operators; then V8's heap limit, which the chart sets through NODE_OPTIONS from the
      // container's memory limit.
      const heapMiB = Math.round(getHeapStatistics().heap_size_limit / 1048576);
      process.stdout.write(
        `node ${process.version} ${process.execArgv.join(' ')}`.trimEnd() + `\nheap limit ${heapMiB} MiB\n` + (await checkRuntime()) + '\n',
      );
    });
}
