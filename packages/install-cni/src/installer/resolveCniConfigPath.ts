import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from '@istio-cni/handoff';
import { listValidConfigFiles } from './cniConfigFiles.ts';
import type { CniConfigSettings } from './cniConfigSettings.ts';
import { STANDALONE_DEFAULT_NAME } from './cniConfigSettings.ts';
import { DirWatcher } from './dirWatcher.ts';

export class WaitAborted extends Error {
  override name = 'WaitAborted';
}

/** The `.conf`↔`.conflist` twin of a missing file, if that one exists (upstream `cni/pkg/install/cniconfig.go`). */
function existingTwin(path: string): string | undefined {
  if (path.endsWith('.conf') && existsSync(path + 'list')) return path + 'list';
  if (path.endsWith('.conflist') && existsSync(path.slice(0, -4))) return path.slice(0, -4);
  return undefined;
}

export interface ResolveOptions {
  /** Name to use instead of auto-detection (the user's CNI_CONF_NAME or a remembered primary). */
  name: string;
  /** Names never chosen by auto-detection (our own owned file). */
  exclude?: ReadonlySet<string>;
  signal?: AbortSignal;
  logger?: Logger;
}

/**
 * The primary CNI config file. Chained: waits (watching the directory) until a valid file exists
 * when no name is given, then until the named file or its twin exists. Standalone: the file we own.
 */
export async function resolveCniConfigPath(c: CniConfigSettings, o: ResolveOptions): Promise<string> {
  const dir = c.mountedCniNetDir;
  if (!c.chainedCniPlugin) return join(dir, o.name || STANDALONE_DEFAULT_NAME);
  const watcher = new DirWatcher([{ dir }]);
  try {
    let name = o.name;
    while (name === '') {
      const valid = (await listValidConfigFiles(dir, o.logger)).filter((n) => !o.exclude?.has(n));
      if (valid[0] !== undefined) {
        name = valid[0];
        break;
      }
      o.logger?.warn('chained plugin but no valid CNI network config yet; waiting', { dir });
      if (!(await watcher.wait(o.signal))) throw new WaitAborted(`no valid CNI network config appeared in ${dir}`);
    }
    let path = join(dir, name);
    while (!existsSync(path)) {
      const twin = existingTwin(path);
      if (twin !== undefined) {
        o.logger?.info('CNI config file missing, using its twin', { missing: path, using: twin });
        path = twin;
        break;
      }
      o.logger?.info('CNI config file does not exist yet; waiting', { path });
      if (!(await watcher.wait(o.signal))) throw new WaitAborted(`CNI config file ${path} did not appear`);
    }
    // A file another component is still writing (not atomically) is not JSON yet: wait for the
    // writer to finish rather than failing the pass on a half-written file.
    while (!isJson(path)) {
      o.logger?.info('CNI config file is not complete JSON yet; waiting', { path });
      if (!(await watcher.wait(o.signal))) throw new WaitAborted(`CNI config file ${path} did not become readable JSON`);
    }
    return path;
  } finally {
    watcher.close();
  }
}

function isJson(path: string): boolean {
  try {
    JSON.parse(readFileSync(path, 'utf8'));
    return true;
  } catch {
    return false;
  }
}
