/**
 * Installer figures: re-insert latency after another writer rewrites the primary conflist
 * without our entry (median and p99), and bytes written by a pass over an unchanged node.
 * Each rewrite waits until the installer is ready again (its watch armed), so the figure is the
 * event → re-insert path; during a sustained fight the upstream throttle adds up to 1 s per pass
 * by design. Pass `throttle: { maxDelayMs: 0 }` to measure without it.
 */
import { mkdtemp, mkdir, copyFile, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createJsonLogger } from '@istio-cni/handoff';
import { atomicWrite } from '../packages/install-cni/src/installer/atomicWrite.ts';
import { Installer, type InstallerSettings } from '../packages/install-cni/src/installer/installer.ts';
import type { ThrottleOptions } from '../packages/install-cni/src/installer/installThrottle.ts';
import { median, percentile } from './measure.ts';
import { UPSTREAM_TESTDATA } from '../test/support/upstreamTestdata.ts';

const TESTDATA = join(UPSTREAM_TESTDATA, 'cni/test/testdata');

export interface InstallerBenchResult {
  rewrites: number;
  reinsertMedianMs: number;
  reinsertP99Ms: number;
  unchangedPassBytes: number;
  unchangedPassFiles: number;
}

async function until(cond: () => Promise<boolean> | boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error('installer bench: timed out');
    await new Promise((r) => setImmediate(r));
  }
}

export async function benchInstaller(
  options: { rewrites?: number; throttle?: Partial<ThrottleOptions>; binarySize?: number } = {},
): Promise<InstallerBenchResult> {
  const rewrites = options.rewrites ?? 100;
  const root = await mkdtemp(join(tmpdir(), 'bench-installer-'));
  const dirs = { src: join(root, 'src'), bin: join(root, 'bin'), net: join(root, 'net'), sa: join(root, 'sa'), run: join(root, 'run') };
  for (const d of Object.values(dirs)) await mkdir(d);
  // A plugin-sized binary, so the unchanged-pass figure shows it is neither rewritten nor re-read.
  await writeFile(join(dirs.src, 'istio-cni'), Buffer.alloc(options.binarySize ?? 64 * 1024 * 1024, 1), { mode: 0o755 });
  for (const f of ['ca.crt', 'token']) await copyFile(join(TESTDATA, 'k8s_svcacct', f), join(dirs.sa, f));
  const clean = await readFile(join(TESTDATA, 'pre/calico.conflist'), 'utf8');
  const primary = join(dirs.net, '10-calico.conflist');
  await writeFile(primary, clean);
  const settings: InstallerSettings = {
    cniBinSourceDir: dirs.src,
    cniBinTargetDirs: [dirs.bin],
    mountedCniNetDir: dirs.net,
    cniAgentRunDir: dirs.run,
    serviceAccountDir: dirs.sa,
    kubeconfigMode: 0o600,
    kubeCaFile: join(dirs.sa, 'ca.crt'),
    skipTlsVerify: false,
    k8sServiceProtocol: 'https',
    k8sServiceHost: '10.110.0.1',
    k8sServicePort: '443',
    cni: {
      mountedCniNetDir: dirs.net,
      cniConfName: '',
      chainedCniPlugin: true,
      owned: false,
      ownedFilename: '02-istio-cni.conflist',
      cniConfGroupRead: false,
      plugin: {
        pluginLogLevel: 'info',
        cniAgentRunDir: dirs.run,
        ambientEnabled: false,
        enablementSelectors: [],
        excludeNamespaces: ['kube-system'],
        podNamespace: 'istio-system',
        nativeNftables: false,
        enableAmbientDetectionRetry: false,
        forceIptablesBinary: '',
      },
    },
  };
  const logger = createJsonLogger({ scope: 'bench', threshold: 'none', sink: () => undefined });
  const installer = new Installer({ settings, logger, ...(options.throttle ? { throttle: options.throttle } : {}) });
  const controller = new AbortController();
  const running = installer.run(controller.signal);
  try {
    await until(() => installer.ready);
    const latencies: number[] = [];
    for (let i = 0; i < rewrites; i++) {
      await until(() => installer.ready);
      const start = performance.now();
      await atomicWrite(primary, clean, 0o644);
      await until(async () => (await readFile(primary, 'utf8')).includes('"istio-cni"'));
      latencies.push(performance.now() - start);
    }
    controller.abort();
    await running;
    const unchanged = await new Installer({ settings, logger }).installAll();
    return {
      rewrites,
      reinsertMedianMs: median(latencies),
      reinsertP99Ms: percentile(latencies, 99),
      unchangedPassBytes: unchanged.bytesWritten,
      unchangedPassFiles: unchanged.filesWritten.length,
    };
  } finally {
    controller.abort();
    await running.catch(() => undefined);
    await rm(root, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  console.log(await benchInstaller({ rewrites: Number(process.env.REWRITES ?? 100) }));
}
