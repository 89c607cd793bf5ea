/**
 * Loads koffi's native module with `process.dlopen`, never through koffi's JavaScript entry.
 *
 * Why: koffi's entry resolves its `.node` file with `createRequire(import.meta.url)` when it is
 * imported, which throws inside the CommonJS esbuild bundle, and a Node SEA cannot `require` a
 * `.node` file at all. The native module alone carries the whole API (`load`, `func`, `alloc`,
 * `node.poll`, ...), so one code path serves tests (type-stripped sources), the bundle and the SEA:
 * 1. `ISTIO_CNI_KOFFI_PATH` (explicit override), else
 * 2. inside a SEA: the asset `koffi.node` (embedded by the build), copied to a private temp dir and
 *    dlopen'ed from there (the mapping outlives the file, so the copy is removed right away), else
 * 3. `koffi.node` next to the executable, else
 * 4. the prebuilt binary of `@koromix/koffi-<platform>-<arch>` resolved from the entry script or cwd.
 */
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import * as sea from 'node:sea';
import type koffiModule from 'koffi';

export type Koffi = typeof koffiModule;

/** Name of the SEA asset that holds koffi's native module (the build embeds it under this key). */
export const KOFFI_SEA_ASSET = 'koffi.node';

let cached: Koffi | undefined;

export function loadKoffi(): Koffi {
  cached ??= dlopen(locateKoffi());
  return cached;
}

/** koffi if something already loaded it, without loading it. */
export function loadedKoffi(): Koffi | undefined {
  return cached;
}

function dlopen(file: { path: string; remove?: () => void }): Koffi {
  const mod = { exports: {} as Record<string, unknown> };
  try {
    process.dlopen(mod, file.path);
  } catch (err) {
    throw new Error(`failed to load koffi native module ${JSON.stringify(file.path)}: ${(err as Error).message}`, { cause: err });
  } finally {
    file.remove?.();
  }
  if (typeof mod.exports.load !== 'function' || typeof mod.exports.version !== 'string') {
    throw new Error(`failed to load koffi native module ${JSON.stringify(file.path)}: not a koffi module`);
  }
  return mod.exports as unknown as Koffi;
}

function locateKoffi(): { path: string; remove?: () => void } {
  const override = process.env.ISTIO_CNI_KOFFI_PATH;
  if (override !== undefined && override !== '') return { path: override };
  if (sea.isSea() && sea.getAssetKeys().includes(KOFFI_SEA_ASSET)) return extractSeaAsset();
  const besideExecutable = join(dirname(process.execPath), 'koffi.node');
  if (existsSync(besideExecutable)) return { path: besideExecutable };
  return { path: prebuiltPath() };
}

function extractSeaAsset(): { path: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'istio-cni-koffi-'));
  const path = join(dir, 'koffi.node');
  writeFileSync(path, new Uint8Array(sea.getAsset(KOFFI_SEA_ASSET)), { mode: 0o500 });
  chmodSync(dir, 0o700);
  return { path, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

function prebuiltPath(): string {
  // Resolved from the entry script and the working directory rather than import.meta, which the
  // CommonJS bundle does not have; both sit inside the repository whenever the SEA asset is absent.
  const pkg = `@koromix/koffi-${process.platform}-${process.arch}`;
  const bases = [process.argv[1], join(process.cwd(), 'noop.js')].filter((b): b is string => b !== undefined && b !== '');
  for (const base of bases) {
    try {
      const pkgJson = createRequire(base).resolve(`${pkg}/package.json`);
      // The musl build is only for musl hosts; our pinned Node is glibc.
      return join(dirname(pkgJson), `${process.platform}_${process.arch}`, 'koffi.node');
    } catch {
      // try the next base
    }
  }
  throw new Error(
    `failed to find koffi native module: package ${pkg} is not resolvable from ${bases.join(', ')} and ISTIO_CNI_KOFFI_PATH is unset`,
  );
}
