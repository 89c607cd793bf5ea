import { LOG_SOCKET, PLUGIN_EVENT_SOCKET, VERSION, runDirPath, type Logger } from '@istio-cni/handoff';
import { errorMessage } from '@istio-cni/cni';
import type { HandoffServer } from './agent/handoffServer.ts';
import type { NodeAgent } from './agent/startNodeAgent.ts';
import { ATTACHMENTS_FILE } from './agent/attachmentStore.ts';
import { startHeapTrimmer, v8Heap } from './heapTrimmer.ts';
import type { DaemonState } from './doctor/doctorReport.ts';
import { Installer, installerSettings } from './installer/installer.ts';
import { removeUpgradeHandover, writeUpgradeHandover } from './installer/upgradeHandover.ts';
import type { ThrottleOptions } from './installer/installThrottle.ts';
import type { DaemonSetLookup } from './installer/upgradeSafety.ts';
import type { LogSinkServer } from './logSink/logSinkServer.ts';
import type { HttpServerHandle } from './metrics/metricsServer.ts';
import { checkInstallerPaths } from './settings/checkPaths.ts';
import { isOwnedMode, type Settings } from './settings/settings.ts';

/**
 * Everything the daemon runs besides the installer, loaded only once the installer's first pass has
 * started (docs/architecture.md "Executables"): the plugin copy then overlaps the loading of this code.
 */
type Services = typeof import('./daemonServices.ts');
const loadServices = (): Promise<Services> => import('./daemonServices.ts');

/**
 * On cleanup, how long the plugin binary and kubeconfig stay after the config no longer chains the
 * plugin: containerd 2.x runs STATUS with its cached list until it reloads (docs/architecture.md,
 * "Degraded mode", STATUS); a missing binary there reports the node's network not ready.
 */
const RUNTIME_RELOAD_GRACE_MS = 2_000;

export interface DaemonOptions {
  settings: Settings;
  logger: Logger;
  /** Where re-emitted plugin log lines go (default: stdout, like the daemon's own log). */
  pluginLogSink?: (line: string) => void;
  /** DaemonSet lookup for the upgrade-safe shutdown (default: the node agent's). */
  upgradeLookup?: DaemonSetLookup;
  throttle?: Partial<ThrottleOptions>;
  /** KUBECONFIG for the agent's own API access; in-cluster credentials are used otherwise. */
  kubeconfigPath?: string;
  /** Called once everything listens (tests use the ports). */
  onStarted?: (info: { readinessPort: number; metricsPort: number | undefined; installer: Installer }) => void;
}

type Closer = () => Promise<unknown>;

/** The daemon's part of `install-cni doctor` (docs/architecture.md, "Verification"). */
async function daemonDoctorState(
  settings: Settings,
  installer: Installer,
  installed: boolean,
  agent: NodeAgent | undefined,
  pod: string | undefined,
): Promise<DaemonState> {
  const seen = await agent?.doctor(pod);
  const iso = (ms: number | undefined) => (ms === undefined ? null : new Date(ms).toISOString());
  return {
    backend:
      seen?.backend ??
      (settings.nativeNftables ? 'nft' : settings.forceIptablesBinary ? `iptables-${settings.forceIptablesBinary}` : 'iptables'),
    installer: {
      ready: installed,
      passes: installer.passes,
      lastPassAt: iso(installer.lastPassAt),
      lastError: installer.lastError ?? null,
    },
    ambient: seen?.ambient ?? { enabled: settings.ambientEnabled, ztunnelConnections: null },
    verification: { intervalSeconds: settings.verifyIntervalMs / 1000, reportOnly: settings.verifyReportOnly },
    agent: agent !== undefined,
    pods: seen?.pods ?? [],
  };
}

/**
 * Runs the node daemon until `signal` aborts (upstream `cni/pkg/cmd/root.go` order): metrics, plugin log sink, health,
 * hand-off server (before the plugin is installed, so the first ADD finds the agent), then the
 * installer loop. The installer's first binary copy and kubeconfig start before all of these; its
 * CNI config waits for them. Shutdown (docs/architecture.md "Where we differ from upstream") cleans up unless this is an upgrade.
 */
export async function runDaemon(given: DaemonOptions, signal: AbortSignal): Promise<void> {
  const { logger } = given;
  logger.info('install-cni starting', { version: VERSION, runDir: given.settings.cniAgentRunDir });
  await checkInstallerPaths(given.settings);
  // Before anything is installed (the plugin's config names the backend too): NATIVE_NFTABLES as this node can honour it,
  // and an ambient node's host state keeps the backend it was written with (either way) until a reboot.
  const opts: DaemonOptions =
    given.settings.nativeNftables || given.settings.ambientEnabled
      ? { ...given, settings: await (await loadServices()).settingsForNftables(given.settings, logger) }
      : given;
  const { settings } = opts;
  const closers: Closer[] = [];
  /** `ztunnel`: this node's ztunnel has connected once (ambient); the readiness taint waits for it. */
  const readiness = { install: false, agent: false, ztunnel: false };
  const agentFailure = new AbortController();
  let agent: NodeAgent | undefined;
  let failure: unknown;
  let readinessChanged = (): void => undefined;
  const installer = new Installer({
    settings: installerSettings(settings),
    logger: logger.with({ component: 'installer' }),
    ...(opts.throttle ? { throttle: opts.throttle } : {}),
    runtimeReloadGraceMs: RUNTIME_RELOAD_GRACE_MS,
    onReadyChange: (ready) => {
      readiness.install = ready;
      readinessChanged();
    },
  });
  installer.prepare();
  try {
    const services = await loadServices();
    const trimmer = startHeapTrimmer({
      intervalMs: settings.heapTrimIntervalMs,
      heap: v8Heap(services.trimMallocArenas),
      logger: logger.with({ component: 'heap' }),
    });
    closers.push(async () => trimmer.stop());
    const { createMetrics, startHandoffServer, startHealthServer, startLogSinkServer, startMetricsServer, noApiHandler } = services;
    const { startNodeTaintRemover, startRepairController } = services;
    const metrics = createMetrics();
    installer.attachMetrics(metrics);
    // Optional readiness taint (not upstream): lifted once installed and synced and, in ambient mode,
    // once this node's ztunnel has connected (a pod scheduled before that cannot be enrolled); never re-added.
    const taint = startNodeTaintRemover({ settings, kubeconfigPath: opts.kubeconfigPath, logger });
    let handedOver = false;
    let waitingForZtunnel = false;
    readinessChanged = () => {
      const agentReady = readiness.install && readiness.agent;
      if (agentReady && settings.ambientEnabled && !readiness.ztunnel && taint !== undefined && !waitingForZtunnel) {
        waitingForZtunnel = true;
        logger.info("daemon ready; node readiness taint kept until this node's ztunnel connects", { component: 'taint' });
      }
      taint?.readinessChanged(agentReady && (readiness.ztunnel || !settings.ambientEnabled));
      // As /readyz: from here on the plugin's STATUS no longer needs the predecessor's hand-over.
      if (readiness.install && (readiness.agent || !settings.ambientEnabled) && !handedOver) {
        handedOver = true;
        removeUpgradeHandover(settings.cniAgentRunDir).catch((err: unknown) =>
          logger.warn('could not remove the upgrade hand-over file', { error: errorMessage(err) }),
        );
      }
    };
    // The installer's first pass may have reported ready before this was set.
    readinessChanged();
    if (taint) closers.push(async () => taint.stop());
    let metricsServer: HttpServerHandle | undefined;
    if (settings.monitoringPort > 0) {
      const server = await startMetricsServer(settings.monitoringPort, metrics.registry, logger, settings.monitoringAddress);
      metricsServer = server;
      closers.push(() => server.close());
    }
    const sinkLine = opts.pluginLogSink ?? ((line: string) => process.stdout.write(line + '\n'));
    const logSink: LogSinkServer = await startLogSinkServer({
      socketPath: runDirPath(settings.cniAgentRunDir, LOG_SOCKET),
      sink: sinkLine,
      threshold: () => settings.logLevels.plugin,
    });
    closers.push(() => logSink.close());
    // Readiness (docs/architecture.md): watch ready gates /readyz only with ambient on; the taint also waits for the informers.
    const health = await startHealthServer(
      settings.readinessPort,
      () => readiness.install && (readiness.agent || !settings.ambientEnabled),
      settings.readinessAddress,
    );
    closers.push(() => health.close());
    agent = startAgent(
      services,
      opts,
      () => (readiness.install ? undefined : 'istio-cni plugin not installed yet'),
      metrics.registry,
      (count) => {
        if (count === 0 || readiness.ztunnel) return;
        readiness.ztunnel = true;
        readinessChanged();
      },
    );
    const handoff: HandoffServer = await startHandoffServer({
      socketPath: runDirPath(settings.cniAgentRunDir, PLUGIN_EVENT_SOCKET),
      handler: agent?.handler ?? noApiHandler({ agentNamespace: settings.podNamespace, excludeNamespaces: settings.excludeNamespaces }),
      logger,
      doctor: (pod) => daemonDoctorState(settings, installer, readiness.install, agent, pod),
    });
    closers.push(() => handoff.close());
    // As upstream `cni/pkg/cmd/root.go`: the repair controller starts after the agent, before the installer loop.
    const repair = startRepairController({
      settings,
      kubeconfigPath: opts.kubeconfigPath,
      logger,
      registry: metrics.registry,
      ...(agent ? { sharedPods: agent.pods } : {}),
    });
    if (repair) closers.push(async () => repair.stop());
    // The installer starts right away; /readyz waits for the ambient agent's start-up (docs/architecture.md "Readiness").
    if (agent) {
      agent.ready.then(
        () => {
          readiness.agent = true;
          readinessChanged();
        },
        (err: unknown) => {
          // As upstream: the ambient agent failing to start is fatal; the installer loop stops.
          logger.error('node agent failed to start', { error: errorMessage(err) });
          agentFailure.abort(err);
        },
      );
    } else {
      readiness.agent = true;
      readinessChanged();
    }
    opts.onStarted?.({ readinessPort: health.port, metricsPort: metricsServer?.port, installer });
    await installer.run(AbortSignal.any([signal, agentFailure.signal]));
    if (agentFailure.signal.aborted) throw agentFailure.signal.reason;
  } catch (err) {
    failure = err;
    logger.error('install-cni failed', { error: errorMessage(err) });
  }
  logger.info('install-cni shutting down', { reason: String(signal.reason ?? (failure ? 'error' : 'signal')) });
  readiness.install = false;
  try {
    const { shouldKeepOnShutdown } = await loadServices();
    const keep = await shouldKeepOnShutdown({
      ambientEnabled: settings.ambientEnabled,
      disableSafeUpgrade: settings.ambientDisableSafeUpgrade,
      ownedConfig: isOwnedMode(settings),
      lookup: opts.upgradeLookup ?? agent?.upgradeLookup,
      logger,
    });
    if (keep) {
      logger.info('upgrade or reboot: leaving the plugin, its config and kubeconfig in place');
      await writeUpgradeHandover(settings.cniAgentRunDir);
    } else {
      await installer.cleanup();
      await removeUpgradeHandover(settings.cniAgentRunDir);
    }
    // In-pod rules of running pods are never removed; node-level ambient state only when not upgrading.
    await agent?.stop(!keep);
  } catch (err) {
    logger.error('cleanup failed', { error: errorMessage(err) });
    failure ??= err;
  }
  for (const close of closers.reverse()) await close().catch(() => undefined);
  logger.info('install-cni stopped');
  if (failure !== undefined) throw failure;
}

/** The node agent, when the daemon can reach the Kubernetes API; `undefined` otherwise. */
function startAgent(
  { parseEnablementSelectors, startNodeAgent }: Services,
  opts: DaemonOptions,
  installerNotReady: () => string | undefined,
  registry: Parameters<Services['startNodeAgent']>[0]['registry'],
  onZtunnelConnections: (count: number) => void,
): NodeAgent | undefined {
  const { settings, logger } = opts;
  if (!opts.kubeconfigPath && !(settings.k8sServiceHost && settings.k8sServicePort)) {
    logger.warn('no Kubernetes API configured: pods that need a decision are refused with "try again later"');
    return undefined;
  }
  return startNodeAgent({
    kube: {
      ...(opts.kubeconfigPath ? { kubeconfigPath: opts.kubeconfigPath } : {}),
      serviceAccountDir: settings.serviceAccountDir,
      serviceHost: settings.k8sServiceHost,
      servicePort: settings.k8sServicePort,
      serviceProtocol: settings.k8sServiceProtocol,
    },
    // NODE_NAME comes from the downward API (spec.nodeName); KUBERNETES_NODE_NAME falls back to the
    // hostname, which is the pod's name when the agent is not on the host network.
    nodeName: settings.nodeName || settings.k8sNodeName,
    podNamespace: settings.podNamespace,
    excludeNamespaces: settings.excludeNamespaces,
    ambientEnabled: settings.ambientEnabled,
    ambientSelectors: parseEnablementSelectors(settings.enablementSelectors),
    nativeNftables: settings.nativeNftables,
    ...(settings.forceIptablesBinary ? { forceIptablesBinary: settings.forceIptablesBinary } : {}),
    hostProcDir: settings.hostProcDir,
    captureEnv: process.env,
    attachmentsFile: runDirPath(settings.cniAgentRunDir, ATTACHMENTS_FILE),
    verifyIntervalMs: settings.verifyIntervalMs,
    verifyReportOnly: settings.verifyReportOnly,
    ambient: {
      systemNamespace: settings.systemNamespace,
      ztunnelUdsAddress: settings.ztunnelUdsAddress,
      hostProcDir: settings.hostProcDir,
      ...(settings.hostNetnsDir === '' ? {} : { hostNetnsDir: settings.hostNetnsDir }),
      switchToHostNetns: settings.allowSwitchToHostNs,
      nativeNftables: settings.nativeNftables,
      ...(settings.forceIptablesBinary ? { forceIptablesBinary: settings.forceIptablesBinary } : {}),
      dnsCapture: settings.ambientDnsCapture,
      ipv6: settings.ambientIpv6,
      reconcilePodRules: settings.ambientReconcilePodRulesOnStartup,
      awsBranchEniProbe: settings.ambientEnableAwsBranchEniProbe,
      ...(settings.hostProbeSnatIp ? { hostProbeSnatIp: settings.hostProbeSnatIp } : {}),
      ...(settings.hostProbeSnatIpv6 ? { hostProbeSnatIpv6: settings.hostProbeSnatIpv6 } : {}),
      onZtunnelConnections,
    },
    logger: logger.with({ component: 'agent' }),
    registry,
    installerNotReady,
  });
}
