import { readFileSync } from 'node:fs';
import { parseInstallerKubeconfig } from './installerKubeconfig.ts';
import { credentialsFromKubeconfig, type KubeCredentials } from './kubeconfigCredentials.ts';

/**
 * `readKubeconfigFile` for a process that should not load the YAML parser it rarely needs
 * (the plugin's degraded mode): the installer's own format is read directly; any other kubeconfig
 * loads the general parser first, with the same result and errors either way.
 */
export async function readKubeconfigFileLazily(file: string): Promise<KubeCredentials> {
  const text = readFileSync(file, 'utf8');
  const doc = parseInstallerKubeconfig(text) ?? (await import('./loadKubeConfig.ts')).parseKubeconfigText(text);
  return credentialsFromKubeconfig(doc, file);
}
