import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PLUGIN, makeHostRoot, startDaemon, type DaemonProcess, type HostRoot } from './daemonProcess.ts';
import { execPlugin, type ExecResult } from './execPlugin.ts';
import { startFakeKubeApi, type FakeKubeApi, type KubeObject } from './fakeKubeApi.ts';
import { startFaultProxy, type FaultProxy } from './faultProxy.ts';

/** The token `makeHostRoot` puts in the service-account dir: the installer copies it into the plugin's kubeconfig. */
const SERVICE_ACCOUNT_TOKEN = 'test-token';

/** Where the pod sits for the plugin: the netns path plus the prevResult the primary plugin produced. */
export interface PodAttachment {
  netns: string;
  containerId: string;
  /** CIDR form, e.g. `10.99.0.2/24`; omitted → no prevResult. */
  address?: string;
  gateway?: string;
}

/**
 * A running `dist/install-cni` against a scratch host root, with its own API access through a fake
 * Kubernetes API (KUBECONFIG) and the installer's plugin kubeconfig pointing at the same fake API
 * (KUBERNETES_SERVICE_* with plain http), so the plugin's degraded mode can reach it too.
 */
export interface AgentRig {
  root: HostRoot;
  api: FakeKubeApi;
  /** Between the daemon (and the plugin's degraded mode) and the API, with `viaFaultProxy`. */
  proxy?: FaultProxy;
  daemon: DaemonProcess;
  /** The istio-cni entry of the installed conflist, as libcni hands it to the plugin. */
  pluginConf(attachment?: PodAttachment, extra?: Record<string, unknown>): Record<string, unknown>;
  /**
   * Execs the built plugin the way libcni does for `pod` in `attachment.netns`, at
   * `plugin_log_level: debug` so stderr carries the verdict (`pod handled by agent`).
   */
  exec(command: string, pod: KubeObject, attachment: PodAttachment, extra?: Record<string, unknown>): Promise<ExecResult>;
  /** Starts the daemon again on the same host root (after `daemon.stop`), with `env` over its settings from then on. */
  restartDaemon(env?: Record<string, string>): Promise<DaemonProcess>;
  close(): Promise<void>;
}

/**
 * The netconf libcni would give the plugin from the installed conflist: the istio-cni entry with
 * the list's name and version, and a prevResult holding the attachment's address.
 */
export function installedPluginConf(
  netDir: string,
  attachment: PodAttachment | undefined,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  const conflist = JSON.parse(readFileSync(join(netDir, '10-primary.conflist'), 'utf8')) as {
    cniVersion: string;
    name: string;
    plugins: Record<string, unknown>[];
  };
  const plugin = conflist.plugins.find((p) => p.type === 'istio-cni');
  if (plugin === undefined) throw new Error(`istio-cni is not in the installed conflist: ${JSON.stringify(conflist)}`);
  const conf: Record<string, unknown> = { ...plugin, cniVersion: conflist.cniVersion, name: conflist.name, ...extra };
  if (attachment?.address !== undefined) {
    conf.prevResult = {
      cniVersion: conflist.cniVersion,
      interfaces: [{ name: 'eth0', sandbox: attachment.netns }],
      ips: [{ address: attachment.address, ...(attachment.gateway ? { gateway: attachment.gateway } : {}), interface: 0 }],
      dns: {},
    };
  }
  return conf;
}

export function cniEnv(command: string, pod: KubeObject, attachment: PodAttachment): Record<string, string> {
  const { name, namespace = 'default', uid = `uid-${namespace}-${name}` } = pod.metadata;
  return {
    CNI_COMMAND: command,
    CNI_CONTAINERID: attachment.containerId,
    CNI_NETNS: attachment.netns,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${attachment.containerId};K8S_POD_UID=${uid}`,
  };
}

/**
 * `daemonEnv` adds daemon settings (e.g. FORCE_IPTABLES_BINARY, NATIVE_NFTABLES); `viaFaultProxy`
 * puts a fault-injecting proxy (`rig.proxy`) between the daemon, the plugin and the API.
 */
export async function startAgentRig(daemonEnv: Record<string, string> = {}, options: { viaFaultProxy?: boolean } = {}): Promise<AgentRig> {
  const root = makeHostRoot();
  let api: FakeKubeApi | undefined;
  let proxy: FaultProxy | undefined;
  try {
    api = await startFakeKubeApi({ token: SERVICE_ACCOUNT_TOKEN });
    proxy = options.viaFaultProxy ? await startFaultProxy(api.url) : undefined;
    const apiUrl = new URL(proxy?.url ?? api.url);
    const kubeconfig = join(root.dir, 'agent-kubeconfig');
    api.writeKubeconfig(kubeconfig, apiUrl.href.replace(/\/$/, ''));
    let env: Record<string, string> = {
      KUBECONFIG: kubeconfig,
      KUBERNETES_SERVICE_HOST: apiUrl.hostname,
      KUBERNETES_SERVICE_PORT: apiUrl.port,
      KUBERNETES_SERVICE_PROTOCOL: 'http',
      ...daemonEnv,
    };
    const rig: AgentRig = {
      root,
      api,
      ...(proxy ? { proxy } : {}),
      daemon: await startDaemon(root, env),
      pluginConf: (attachment, extra = {}) => installedPluginConf(root.netDir, attachment, extra),
      exec(command, pod, attachment, extra) {
        return execPlugin(
          PLUGIN,
          cniEnv(command, pod, attachment),
          JSON.stringify(rig.pluginConf(attachment, { plugin_log_level: 'debug', ...extra })),
          { timeoutMs: 60_000 },
        );
      },
      async restartDaemon(changed = {}) {
        env = { ...env, ...changed };
        rig.daemon = await startDaemon(root, env);
        return rig.daemon;
      },
      async close() {
        await rig.daemon.stop();
        await proxy?.close();
        await api?.close();
        root.remove();
      },
    };
    return rig;
  } catch (err) {
    await proxy?.close();
    await api?.close();
    root.remove();
    throw err;
  }
}
