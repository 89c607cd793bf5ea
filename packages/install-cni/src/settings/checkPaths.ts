import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import type { Settings } from './settings.ts';
import { SettingsError } from './parseValues.ts';

async function checkDir(setting: string, path: string, mode: number): Promise<string | undefined> {
  try {
    const st = await stat(path);
    if (!st.isDirectory()) return `invalid ${setting} ${JSON.stringify(path)}: not a directory`;
    await access(path, mode);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    return `invalid ${setting} ${JSON.stringify(path)}: ${code === 'ENOENT' ? 'does not exist' : code}`;
  }
}

/** Directories the installer needs must exist and be usable; reports every problem at once. */
export async function checkInstallerPaths(s: Pick<Settings, 'cniBinSourceDir' | 'cniBinTargetDirs' | 'mountedCniNetDir'>): Promise<void> {
  const checks = [
    checkDir('CNI_BIN_SOURCE_DIR', s.cniBinSourceDir, constants.R_OK | constants.X_OK),
    ...s.cniBinTargetDirs.map((d) => checkDir('CNI_BIN_TARGET_DIRS', d, constants.W_OK | constants.X_OK)),
    checkDir('MOUNTED_CNI_NET_DIR', s.mountedCniNetDir, constants.W_OK | constants.R_OK | constants.X_OK),
  ];
  const problems = (await Promise.all(checks)).filter((p): p is string => p !== undefined);
  if (problems.length > 0) throw new SettingsError(problems.join('; '));
}
