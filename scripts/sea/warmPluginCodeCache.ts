/**
 * Produces the plugin's warmed V8 code cache: runs the bundle as the runtime would for two ADDs in
 * one process, one answered by a stand-in agent and one in degraded mode (scripts/pluginStandIns.ts),
 * and keeps the code cache V8 has at exit. The executable's loader compiles the bundle with it, so
 * the functions on both ADD paths start compiled.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { withPluginStandIns } from '../pluginStandIns.ts';

export async function warmPluginCodeCache(
  nodeBinary: string,
  nodeFlags: readonly string[],
  bundleFile: string,
  cacheFile: string,
): Promise<void> {
  await withPluginStandIns(async (runs) => {
    const plan = [runs.agentAdd, runs.degradedAdd].map(({ env, stdin }) => ({ env, stdin }));
    const dir = mkdtempSync(join(tmpdir(), 'istio-cni-warm-plan-'));
    try {
      const planFile = join(dir, 'plan.json');
      writeFileSync(planFile, JSON.stringify(plan));
      // The degraded run logs (agent unreachable): shown only if the warm-up fails.
      let stderr = '';
      const code = await new Promise<number | null>((resolve, reject) => {
        const child = spawn(nodeBinary, [...nodeFlags, join(import.meta.dirname, 'warmCodeCache.cjs'), bundleFile, cacheFile, planFile], {
          env: runs.agentAdd.env,
          stdio: ['ignore', 'ignore', 'pipe'],
        });
        child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
        child.on('error', reject);
        child.on('close', resolve);
      });
      if (code !== 0) throw new Error(`code-cache warm-up run exited ${code}: ${stderr}`);
      if (!stderr.includes(runs.degradedAdd.stderrIncludes ?? '')) throw new Error(`the degraded warm-up ADD did not run: ${stderr}`);
      if (statSync(cacheFile).size === 0) throw new Error('code-cache warm-up wrote an empty cache');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
