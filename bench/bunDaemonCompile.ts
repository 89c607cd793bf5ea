/**
 * Runs under Bun, not Node (bench/bunDaemon.ts starts it): compiles packages/install-cni into one
 * Bun executable, `bun build --compile --minify --bytecode` through Bun.build, for a side by side
 * with the Node SEA. Not a production build: scripts/build.ts makes dist/install-cni.
 *
 * Usage: bun bench/bunDaemonCompile.ts OUTFILE [--poll-stand-in]
 *
 * Bun has no `node:sea` module, which loadKoffi.ts imports to find the koffi addon embedded in the
 * SEA. A build-time module stands in for it: the same three functions, over koffi.node embedded in
 * the Bun executable as a file (read from Bun's embedded file system), so the daemon's own code path
 * (extract the asset, dlopen it through Bun's N-API) is the one that runs.
 *
 * Bun's libuv shim has no `uv_poll_init_socket`: the first `koffi.node.poll` (polledFd.ts: the ZDS
 * listener waiting for ztunnel, every ZDS read) panics the process. `--poll-stand-in` swaps
 * `koffi.node.poll` for a timer that calls poll(2) with a zero timeout on every watched fd each
 * millisecond, only so that the ambient figures can be taken at all: latency up to a tick and a
 * syscall per tick, not a port.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

interface BunBuildOutput {
  success: boolean;
  logs: unknown[];
}
interface BunPluginBuilder {
  onResolve(options: { filter: RegExp }, callback: () => { path: string; namespace: string }): void;
  onLoad(options: { filter: RegExp; namespace?: string }, callback: () => { loader: 'js' | 'ts'; contents: string }): void;
}
declare const Bun: {
  build(options: {
    entrypoints: string[];
    compile: { target: string; outfile: string };
    minify: boolean;
    bytecode: boolean;
    define: Record<string, string>;
    plugins: { name: string; setup(build: BunPluginBuilder): void }[];
  }): Promise<BunBuildOutput>;
};

const root = resolve(import.meta.dirname, '..');
const outfile = process.argv[2];
if (outfile === undefined) throw new Error('usage: bun bench/bunDaemonCompile.ts OUTFILE [--poll-stand-in]');
const pollStandIn = process.argv.includes('--poll-stand-in');
const loadKoffiSource = join(root, 'packages/dataplane/src/seqpacket/loadKoffi.ts');
const LOAD_LINE = 'cached ??= dlopen(locateKoffi());';
const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;
const koffiAddon = join(root, 'node_modules/@koromix/koffi-linux-x64/linux_x64/koffi.node');

/** `node:sea` for Bun: isSea, getAssetKeys and getAsset over the one asset the daemon reads. */
const seaStandIn = `import { readFileSync } from 'node:fs';
import koffiAddon from ${JSON.stringify(koffiAddon)} with { type: 'file' };
export const isSea = () => true;
export const getAssetKeys = () => ['koffi.node'];
export function getAsset(key) {
  if (key !== 'koffi.node') throw new Error('no asset ' + key);
  const b = readFileSync(koffiAddon);
  return b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
}
`;

/** uv_poll's contract as polledFd.ts uses it (level-triggered callback(status, events); start, stop, close), over poll(2). */
const pollStandInSource = `
function withPollStandIn(koffi: any): any {
  const poll = koffi.load('libc.so.6').func('int poll(void *fds, unsigned long nfds, int timeout)');
  const POLLIN = 0x1, POLLOUT = 0x4, POLLERR = 0x8, POLLHUP = 0x10, POLLNVAL = 0x20, POLLRDHUP = 0x2000;
  const handles = new Set<any>();
  let timer: any;
  const tick = () => {
    const active = [...handles];
    if (active.length === 0) { clearInterval(timer); timer = undefined; return; }
    const fds = Buffer.alloc(8 * active.length);
    active.forEach((h, i) => {
      fds.writeInt32LE(h.fd, 8 * i);
      fds.writeInt16LE((h.opts.readable ? POLLIN : 0) | (h.opts.writable ? POLLOUT : 0) | (h.opts.disconnect ? POLLRDHUP : 0), 8 * i + 4);
    });
    if (poll(fds, active.length, 0) <= 0) return;
    active.forEach((h, i) => {
      const r = fds.readInt16LE(8 * i + 6);
      if (r === 0 || !handles.has(h)) return;
      if (r & POLLNVAL) return h.cb(-9, { readable: false, writable: false, disconnect: false });
      h.cb(0, { readable: (r & POLLIN) !== 0, writable: (r & POLLOUT) !== 0, disconnect: (r & (POLLHUP | POLLRDHUP | POLLERR)) !== 0 });
    });
  };
  const arm = (h: any) => { handles.add(h); timer ??= setInterval(tick, 1); };
  const node = {
    ...koffi.node,
    poll(fd: number, opts: any, cb: any) {
      const h = { fd, opts, cb, start(o: any, c: any) { h.opts = o; h.cb = c; arm(h); }, stop() { handles.delete(h); }, close() { handles.delete(h); } };
      arm(h);
      return h;
    },
  };
  return new Proxy(koffi, { get: (target, key) => (key === 'node' ? node : target[key]) });
}
`;

const result = await Bun.build({
  entrypoints: [join(root, 'packages/install-cni/src/main.ts')],
  compile: { target: 'bun-linux-x64', outfile: resolve(outfile) },
  minify: true,
  bytecode: true,
  define: { 'globalThis.ISTIO_CNI_BUILD_VERSION': JSON.stringify(version) },
  plugins: [
    {
      name: 'node-sea-stand-in',
      setup(build) {
        build.onResolve({ filter: /^node:sea$/ }, () => ({ path: 'node:sea', namespace: 'sea-stand-in' }));
        build.onLoad({ filter: /.*/, namespace: 'sea-stand-in' }, () => ({ loader: 'js', contents: seaStandIn }));
      },
    },
    ...(pollStandIn
      ? [
          {
            name: 'uv-poll-stand-in',
            setup(build: BunPluginBuilder) {
              build.onLoad({ filter: /seqpacket\/loadKoffi\.ts$/ }, () => {
                const source = readFileSync(loadKoffiSource, 'utf8');
                if (!source.includes(LOAD_LINE)) throw new Error(`${loadKoffiSource} no longer has \`${LOAD_LINE}\``);
                return {
                  loader: 'ts',
                  contents: source.replace(LOAD_LINE, 'cached ??= withPollStandIn(dlopen(locateKoffi()));') + pollStandInSource,
                };
              });
            },
          },
        ]
      : []),
  ],
});
if (!result.success) {
  console.error(result.logs);
  process.exit(1);
}
