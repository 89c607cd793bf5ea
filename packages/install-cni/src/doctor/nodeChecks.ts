import { open, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { errorMessage } from '@istio-cni/cni';
import { PLUGIN_KUBECONFIG, runDirPath } from '@istio-cni/handoff';
import { isConfigFileName } from '../installer/cniConfigFiles.ts';
import type { BinaryCheck, CniConfigCheck, NodeChecks } from './doctorReport.ts';

export interface NodeCheckPaths {
  cniBinSourceDir: string;
  cniBinTargetDirs: readonly string[];
  mountedCniNetDir: string;
  cniAgentRunDir: string;
}

const PLUGIN = 'istio-cni';

/** Byte-for-byte equality, read in 1 MiB chunks (the plugin is 100+ MiB). */
async function sameBytes(a: string, b: string): Promise<boolean> {
  const [sa, sb] = await Promise.all([stat(a), stat(b)]);
  if (sa.size !== sb.size) return false;
  const [fa, fb] = await Promise.all([open(a, 'r'), open(b, 'r')]);
  try {
    const size = 1 << 20;
    const ba = Buffer.alloc(size);
    const bb = Buffer.alloc(size);
    for (let pos = 0; pos < sa.size; pos += size) {
      const [ra, rb] = await Promise.all([fa.read(ba, 0, size, pos), fb.read(bb, 0, size, pos)]);
      if (ra.bytesRead !== rb.bytesRead || !ba.subarray(0, ra.bytesRead).equals(bb.subarray(0, rb.bytesRead))) return false;
    }
    return true;
  } finally {
    await Promise.all([fa.close(), fb.close()]);
  }
}

async function checkBinary(source: string, dir: string): Promise<BinaryCheck> {
  const target = join(dir, PLUGIN);
  try {
    await stat(target);
  } catch {
    return { dir, present: false, identical: false };
  }
  try {
    const identical = await sameBytes(source, target);
    return identical ? { dir, present: true, identical } : { dir, present: true, identical, problem: 'content differs' };
  } catch (err) {
    return { dir, present: true, identical: false, problem: errorMessage(err) };
  }
}

interface PluginList {
  plugins?: { type?: unknown }[];
  type?: unknown;
}

/** Which config names `istio-cni`, where in its chain, and whether the runtime loads that file (the lexically first). */
async function checkCniConfig(netDir: string): Promise<CniConfigCheck> {
  let names: string[];
  try {
    names = (await readdir(netDir)).filter(isConfigFileName).sort();
  } catch (err) {
    return { file: null, primary: false, position: null, plugins: null, problem: `CNI config directory unreadable: ${errorMessage(err)}` };
  }
  for (const [i, name] of names.entries()) {
    let parsed: PluginList;
    try {
      parsed = JSON.parse(await readFile(join(netDir, name), 'utf8')) as PluginList;
    } catch {
      continue;
    }
    const plugins = Array.isArray(parsed.plugins) ? parsed.plugins : [parsed];
    const at = plugins.findIndex((p) => p?.type === PLUGIN);
    if (at < 0) continue;
    const check: CniConfigCheck = { file: join(netDir, name), primary: i === 0, position: at + 1, plugins: plugins.length };
    if (i !== 0) check.problem = `the runtime loads ${names[0]} first, not ${name} which names istio-cni`;
    return check;
  }
  return { file: null, primary: false, position: null, plugins: null, problem: `no CNI config in ${netDir} names istio-cni` };
}

/** The checks `doctor` makes itself, so they answer even with the daemon down. */
export async function checkNode(paths: NodeCheckPaths): Promise<NodeChecks> {
  const source = join(paths.cniBinSourceDir, PLUGIN);
  const kubeconfig = runDirPath(paths.cniAgentRunDir, PLUGIN_KUBECONFIG);
  const [binaries, cniConfig, kubeconfigPresent] = await Promise.all([
    Promise.all(paths.cniBinTargetDirs.map((dir) => checkBinary(source, dir))),
    checkCniConfig(paths.mountedCniNetDir),
    stat(kubeconfig).then(
      () => true,
      () => false,
    ),
  ]);
  return { binaries, cniConfig, kubeconfig: { path: kubeconfig, present: kubeconfigPresent } };
}
