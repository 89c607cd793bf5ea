import { mkdtemp, rm, copyFile, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createJsonLogger, type Logger } from '@istio-cni/handoff';
import type { CniConfigSettings } from '../src/installer/cniConfigSettings.ts';
import type { PluginConfigInput } from '../src/installer/pluginConfig.ts';

export const UPSTREAM = resolve(import.meta.dirname, '../../../../shared/upstream-testdata/cni');
export const INSTALL_TESTDATA = join(UPSTREAM, 'pkg/install/testdata');
export const CNI_TESTDATA = join(UPSTREAM, 'test/testdata');

export async function tempDir(t: { after(fn: () => unknown): void }, prefix = 'install-cni-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

export async function seed(dir: string, files: Record<string, string>, from = INSTALL_TESTDATA): Promise<void> {
  for (const [name, src] of Object.entries(files)) await copyFile(join(from, src), join(dir, name));
}

export function trimmed(s: string): string {
  return s.trim();
}

export async function fixture(path: string): Promise<string> {
  return readFile(path, 'utf8');
}

/** Plugin settings of the `cni/pkg/install` tests (CASES 5.4). */
export const INSTALL_TEST_PLUGIN: PluginConfigInput = {
  pluginLogLevel: 'debug',
  cniAgentRunDir: '/path/to/kubeconfig',
  ambientEnabled: false,
  enablementSelectors: [],
  excludeNamespaces: [],
  podNamespace: 'my-namespace',
  nativeNftables: false,
  enableAmbientDetectionRetry: false,
};

export function cniSettings(dir: string, over: Partial<CniConfigSettings> = {}, plugin: Partial<PluginConfigInput> = {}): CniConfigSettings {
  return {
    mountedCniNetDir: dir,
    cniConfName: '',
    chainedCniPlugin: true,
    owned: false,
    ownedFilename: '02-istio-conf.conflist',
    cniConfGroupRead: false,
    plugin: { ...INSTALL_TEST_PLUGIN, ...plugin },
    ...over,
  };
}

export interface CapturedLog {
  logger: Logger;
  lines: Record<string, unknown>[];
}

export function captureLogger(): CapturedLog {
  const lines: Record<string, unknown>[] = [];
  const logger = createJsonLogger({ scope: 'test', threshold: 'debug', sink: (l) => lines.push(JSON.parse(l) as Record<string, unknown>) });
  return { logger, lines };
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export async function writeText(path: string, text: string): Promise<void> {
  await writeFile(path, text);
}
