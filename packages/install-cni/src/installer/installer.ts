import { mkdir, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { PLUGIN_KUBECONFIG, RUN_DIR_MODE, runDirPath, type Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { Settings } from '../settings/settings.ts';
import { checkValidCniConfig, type CheckState } from './checkValidCniConfig.ts';
import { atomicWrite, removeStaleTemps } from './atomicWrite.ts';
import { cleanupInstall, type CleanupReport } from './cleanupInstall.ts';
import { isConfigFileName } from './cniConfigFiles.ts';
import { cniConfigSettings, type CniConfigSettings } from './cniConfigSettings.ts';
import { copyBinaries, loadVerifiedCopies, serializeVerifiedCopies, VERIFIED_COPIES_FILE, type VerifiedCopies } from './copyBinaries.ts';
import { DirWatcher, type WatchTarget } from './dirWatcher.ts';
import { InstallThrottle, type ThrottleOptions } from './installThrottle.ts';
import { writeKubeconfig } from './kubeconfig.ts';
import { WaitAborted } from './resolveCniConfigPath.ts';
import { writeCniConfig, type ConfigRecord } from './writeCniConfig.ts';
import { newWriteStats, recordWrite, type WriteStats } from './writeStats.ts';

export type InstallResult = 'SUCCESS' | 'COPY_BINARIES_FAILURE' | 'CREATE_KUBECONFIG_FAILURE' | 'CREATE_CNI_CONFIG_FAILURE';

/** Where the installer reports (upstream `cni/pkg/install/monitoring.go`); the daemon backs it with Prometheus. */
export interface InstallMetrics {
  installResult(result: InstallResult): void;
  setInstallReady(ready: boolean): void;
}

export type InstallerSettings = Pick<
  Settings,
  | 'cniBinSourceDir'
  | 'cniBinTargetDirs'
  | 'mountedCniNetDir'
  | 'cniAgentRunDir'
  | 'serviceAccountDir'
  | 'kubeconfigMode'
  | 'kubeCaFile'
  | 'skipTlsVerify'
  | 'k8sServiceProtocol'
  | 'k8sServiceHost'
  | 'k8sServicePort'
> & { cni: CniConfigSettings };

export function installerSettings(s: Settings): InstallerSettings {
  return { ...s, cni: cniConfigSettings(s) };
}

export interface InstallerOptions {
  settings: InstallerSettings;
  logger: Logger;
  metrics?: InstallMetrics;
  onReadyChange?: (ready: boolean) => void;
  throttle?: Partial<ThrottleOptions>;
  /** How long cleanup leaves the plugin and kubeconfig in place after unchaining it (see cleanupInstall's runtimeReload). */
  runtimeReloadGraceMs?: number;
}

/** A failed pass; `result` is the metric label it was counted under. */
export class InstallError extends Error {
  override name = 'InstallError';
  readonly result: InstallResult;
  constructor(result: InstallResult, message: string, options?: { cause: unknown }) {
    super(message, options);
    this.result = result;
  }
}

/**
 * Installs the plugin binary, its kubeconfig and the CNI config, then keeps them installed
 * (upstream `cni/pkg/install/install.go`), and removes them again on {@link cleanup} (see
 * docs/architecture.md "Where we differ from upstream").
 */
export class Installer {
  readonly #s: InstallerSettings;
  readonly #log: Logger;
  #metrics: InstallMetrics | undefined;
  /** Results counted before {@link attachMetrics}. */
  readonly #unreported = new Map<InstallResult, number>();
  readonly #onReadyChange: ((ready: boolean) => void) | undefined;
  readonly #throttleOptions: Partial<ThrottleOptions>;
  readonly #runtimeReloadGraceMs: number;
  readonly #state: CheckState = { configPath: '', primaryName: '' };
  readonly #records = new Map<string, ConfigRecord>();
  #verified: VerifiedCopies = new Map();
  /** What the verified-copies file holds, as written or read. */
  #verifiedSaved: string | undefined;
  #installedBins: Set<string> | undefined;
  /** The first pass's file work, when {@link prepare} started it. */
  #prepared: { stats: WriteStats; done: Promise<void> } | undefined;
  #ready = false;
  /** Stats of the most recent pass. */
  lastPass: WriteStats = newWriteStats();
  passes = 0;
  /** When the last pass finished (ms since the epoch), and why the last pass failed if it did (`doctor`). */
  lastPassAt: number | undefined;
  lastError: string | undefined;

  constructor(o: InstallerOptions) {
    this.#s = o.settings;
    this.#log = o.logger;
    this.#metrics = o.metrics;
    this.#onReadyChange = o.onReadyChange;
    this.#throttleOptions = o.throttle ?? {};
    this.#runtimeReloadGraceMs = o.runtimeReloadGraceMs ?? 0;
  }

  get ready(): boolean {
    return this.#ready;
  }

  /** The CNI config file holding our entry (or our own file); empty before the first pass. */
  get configPath(): string {
    return this.#state.configPath;
  }

  get kubeconfigPath(): string {
    return runDirPath(this.#s.cniAgentRunDir, PLUGIN_KUBECONFIG);
  }

  #setReady(ready: boolean): void {
    if (ready === this.#ready) return;
    this.#ready = ready;
    this.#metrics?.setInstallReady(ready);
    this.#onReadyChange?.(ready);
  }

  /**
   * Reports to `metrics` from now on, with what happened before: the daemon loads its metrics code
   * after the first pass has started (see {@link prepare}).
   */
  attachMetrics(metrics: InstallMetrics): void {
    this.#metrics = metrics;
    for (const [result, times] of this.#unreported) for (let i = 0; i < times; i++) metrics.installResult(result);
    this.#unreported.clear();
    metrics.setInstallReady(this.#ready);
  }

  #count(result: InstallResult): void {
    if (this.#metrics) this.#metrics.installResult(result);
    else this.#unreported.set(result, (this.#unreported.get(result) ?? 0) + 1);
  }

  #fail(result: InstallResult, what: string, err: unknown): never {
    this.#count(result);
    if (err instanceof WaitAborted) throw err;
    throw new InstallError(result, `${what}: ${errorMessage(err)}`, { cause: err });
  }

  /**
   * Starts the first pass's file work (binaries and kubeconfig) ahead of {@link run}, which then only
   * adds the CNI config: the daemon calls it before loading and starting its servers, so the plugin
   * copy (disk-bound, off the main thread) overlaps them. The config still comes after both files.
   */
  prepare(): void {
    if (this.#prepared !== undefined || this.passes > 0) return;
    const stats = newWriteStats();
    const done = this.#installFiles(stats);
    // Awaited by the first pass, or by cleanup() when the daemon fails before it.
    done.catch(() => undefined);
    this.#prepared = { stats, done };
  }

  /** One install pass: binaries and kubeconfig, then the CNI config only when it is not valid. */
  async installAll(signal?: AbortSignal): Promise<WriteStats> {
    try {
      const stats = await this.#installAll(signal);
      this.lastError = undefined;
      return stats;
    } catch (err) {
      this.lastError = errorMessage(err);
      throw err;
    } finally {
      this.lastPassAt = Date.now();
    }
  }

  async #installAll(signal?: AbortSignal): Promise<WriteStats> {
    const prepared = this.#prepared;
    this.#prepared = undefined;
    const stats = prepared?.stats ?? newWriteStats();
    this.passes++;
    await (prepared?.done ?? this.#installFiles(stats));
    const s = this.#s;
    const problem = await checkValidCniConfig(s.cni, this.#state, this.#log);
    if (problem === undefined) {
      this.#log.debug('valid istio-cni config present; not modifying', { path: this.#state.configPath });
    } else {
      this.#log.info('CNI config requires updates; (re)writing', { path: this.#state.configPath, reason: problem });
      try {
        const record = await writeCniConfig(s.cni, {
          primaryName: s.cni.cniConfName || (s.cni.owned ? this.#state.primaryName : ''),
          ...(signal ? { signal } : {}),
          logger: this.#log,
          stats,
        });
        this.#remember(record);
      } catch (err) {
        this.#fail('CREATE_CNI_CONFIG_FAILURE', 'create CNI config file', err);
      }
    }
    // Only spares the next start a re-read of the binaries, so it need not delay the config.
    try {
      await this.#saveVerified(stats);
    } catch (err) {
      this.#fail('COPY_BINARIES_FAILURE', 'copy binaries', err);
    }
    this.lastPass = stats;
    return stats;
  }

  /**
   * Binaries and kubeconfig, written concurrently (neither needs the other); a failure of either is
   * the pass's failure, the binaries' first.
   */
  async #installFiles(stats: WriteStats): Promise<void> {
    const [binaries, kubeconfig] = await Promise.allSettled([this.#installBinaries(stats), this.#installKubeconfig(stats)]);
    if (binaries.status === 'rejected') {
      const err: unknown = binaries.reason;
      if (errorMessage(err).includes('read-only file system') || (err as NodeJS.ErrnoException).code === 'EROFS') {
        this.#log.warn(
          'hint: some Kubernetes environments require customization of the CNI directory; ensure global.platform=<name> is set during installation',
        );
      }
      this.#fail('COPY_BINARIES_FAILURE', 'copy binaries', err);
    }
    if (kubeconfig.status === 'rejected') this.#fail('CREATE_KUBECONFIG_FAILURE', 'write kubeconfig', kubeconfig.reason);
  }

  async #installBinaries(stats: WriteStats): Promise<void> {
    const s = this.#s;
    if (this.#verifiedSaved === undefined) {
      // A kill during an earlier run's save leaves its temp file; the record itself is whole or absent.
      await removeStaleTemps(this.#verifiedCopiesPath);
      this.#verified = await loadVerifiedCopies(this.#verifiedCopiesPath);
      this.#verifiedSaved = serializeVerifiedCopies(this.#verified);
    }
    const copied = await copyBinaries({
      sourceDir: s.cniBinSourceDir,
      targetDirs: s.cniBinTargetDirs,
      ...(this.#installedBins ? { only: this.#installedBins } : {}),
      verified: this.#verified,
      logger: this.#log,
      stats,
    });
    this.#installedBins ??= copied;
  }

  async #installKubeconfig(stats: WriteStats): Promise<void> {
    const s = this.#s;
    await writeKubeconfig({
      path: this.kubeconfigPath,
      mode: s.kubeconfigMode,
      k8sServiceProtocol: s.k8sServiceProtocol,
      k8sServiceHost: s.k8sServiceHost,
      k8sServicePort: s.k8sServicePort,
      kubeCaFile: s.kubeCaFile,
      skipTlsVerify: s.skipTlsVerify,
      tokenFile: join(s.serviceAccountDir, 'token'),
      logger: this.#log,
      stats,
    });
  }

  get #verifiedCopiesPath(): string {
    return runDirPath(this.#s.cniAgentRunDir, VERIFIED_COPIES_FILE);
  }

  /** Keeps the verified copies for the next run: a restart then trusts them without reading the binaries again. */
  async #saveVerified(stats: WriteStats): Promise<void> {
    const text = serializeVerifiedCopies(this.#verified);
    if (text === this.#verifiedSaved) return;
    await mkdir(this.#s.cniAgentRunDir, { recursive: true, mode: RUN_DIR_MODE });
    await atomicWrite(this.#verifiedCopiesPath, text, 0o600);
    recordWrite(stats, this.#verifiedCopiesPath, text);
    this.#verifiedSaved = text;
  }

  #remember(record: ConfigRecord): void {
    const earlier = this.#records.get(record.path);
    // Rewriting our own intact write: the bytes to restore are still those before the first one.
    if (earlier && record.previous?.path === earlier.path && record.previous.bytes.toString('utf8') === earlier.written) {
      record.previous = earlier.previous;
    }
    this.#records.set(record.path, record);
    this.#state.configPath = record.path;
    if (record.kind === 'owned' && record.primary !== undefined) this.#state.primaryName = record.primary;
  }

  #watchTargets(): WatchTarget[] {
    const s = this.#s;
    const bins = this.#installedBins ?? new Set<string>();
    return [
      ...s.cniBinTargetDirs.map((dir) => ({ dir, names: bins })),
      // Only files the runtime loads: another writer's temp file appearing is not a change yet
      // (reacting to it would run a pass before its rename lands).
      { dir: s.mountedCniNetDir, accept: isConfigFileName },
      { dir: s.cniAgentRunDir, names: new Set([basename(this.kubeconfigPath)]) },
    ];
  }

  /**
   * The inputs of the kubeconfig (token, CA). Watched for the whole run, not per iteration: kubelet's
   * token swap is several events, and one arriving while a pass runs must still cause another pass.
   */
  #inputWatchTargets(): WatchTarget[] {
    const s = this.#s;
    const dirs = new Set([s.serviceAccountDir]);
    if (!s.skipTlsVerify) dirs.add(dirname(s.kubeCaFile));
    return [...dirs].map((dir) => ({ dir }));
  }

  /**
   * Blocks until something we depend on may have changed (upstream `sleepCheckInstall`). Ready only while
   * the config is valid and no event is pending. Returns false when `signal` aborted.
   */
  async #sleepWatchInstall(inputs: DirWatcher, signal: AbortSignal): Promise<boolean> {
    // Created before the check so no change after the check is missed; fresh each time so our
    // own writes of the previous pass are not seen as changes.
    const watcher = new DirWatcher(this.#watchTargets());
    try {
      const problem = await checkValidCniConfig(this.#s.cni, this.#state, this.#log);
      if (problem !== undefined) {
        this.#log.info('CNI config invalid; reinstalling', { reason: problem });
        return !signal.aborted;
      }
      if (watcher.pending || inputs.pending) return !signal.aborted;
      this.#setReady(true);
      this.#count('SUCCESS');
      const either = new AbortController();
      const stop = (): void => either.abort();
      signal.addEventListener('abort', stop, { once: true });
      try {
        // A shutdown that arrived during the check above fired its 'abort' event before we listened.
        if (signal.aborted) return false;
        const changed = await Promise.race([watcher.wait(either.signal), inputs.wait(either.signal)]);
        return changed && !signal.aborted;
      } finally {
        signal.removeEventListener('abort', stop);
        either.abort();
      }
    } finally {
      this.#setReady(false);
      watcher.close();
    }
  }

  /**
   * First pass (errors are fatal), then watch and re-install until `signal` aborts. Later failed
   * passes are logged and retried (paced by the throttle), so a writer racing us cannot stop the daemon.
   */
  async run(signal: AbortSignal): Promise<void> {
    const inputs = new DirWatcher(this.#inputWatchTargets());
    try {
      try {
        await this.installAll(signal);
      } catch (err) {
        if (err instanceof WaitAborted && signal.aborted) return;
        throw err;
      }
      this.#log.info('initial installation complete; watching for changes');
      await this.#loop(inputs, new InstallThrottle(this.#throttleOptions), signal);
    } finally {
      inputs.close();
    }
  }

  async #loop(inputs: DirWatcher, throttle: InstallThrottle, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const { warn } = await throttle.throttle(signal);
      if (warn) {
        const hint = this.#state.configPath.includes('cilium')
          ? " Hint: Cilium CNI was detected; ensure 'cni.exclusive=false' in the Cilium configuration."
          : '';
        this.#log.warn(
          'Configuration has been reconciled multiple times in a short period of time. ' +
            `This may be due to a conflicting component constantly reverting our work.${hint}`,
          { hits: throttle.hits, path: this.#state.configPath },
        );
      }
      if (signal.aborted || !(await this.#sleepWatchInstall(inputs, signal))) break;
      this.#log.debug('detected changes to the node-level CNI setup; checking');
      inputs.clearPending();
      try {
        await this.installAll(signal);
      } catch (err) {
        if (err instanceof WaitAborted && signal.aborted) break;
        this.#log.error('reinstall failed; will retry', { error: errorMessage(err) });
      }
    }
  }

  /** Removes what we installed (see {@link cleanupInstall}). */
  async cleanup(): Promise<CleanupReport> {
    this.#setReady(false);
    // A prepared pass the daemon never awaited (it failed first) must not write behind the cleanup.
    await this.#prepared?.done.catch(() => undefined);
    this.#prepared = undefined;
    const configs = [{ path: this.#state.configPath, record: this.#records.get(this.#state.configPath) }];
    for (const [path, record] of this.#records) configs.push({ path, record });
    await rm(this.#verifiedCopiesPath, { force: true });
    this.#verifiedSaved = undefined;
    this.#verified = new Map();
    return cleanupInstall({
      netDir: this.#s.mountedCniNetDir,
      chained: this.#s.cni.chainedCniPlugin,
      owned: this.#s.cni.owned,
      configs,
      kubeconfigPath: this.kubeconfigPath,
      binTargetDirs: this.#s.cniBinTargetDirs,
      ...(this.#runtimeReloadGraceMs > 0
        ? { runtimeReload: () => new Promise<void>((r) => setTimeout(r, this.#runtimeReloadGraceMs)) }
        : {}),
      logger: this.#log,
    });
  }
}
