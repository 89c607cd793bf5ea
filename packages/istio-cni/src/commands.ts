import {
  CniError,
  ErrorCode,
  emptyResult,
  encodeResult,
  parseK8sArgs,
  validAttachments,
  type CmdArgs,
  type K8sArgs,
  type NetConf,
  type PluginFuncs,
} from '@istio-cni/cni';
import {
  PROTOCOL,
  isFailure,
  localPolicyOf,
  parsePluginConfig,
  type HandoffCommand,
  type HandoffRequest,
  type HandoffVerdict,
  type Logger,
  type PluginConfig,
  type PodIp,
} from '@istio-cni/handoff';
import { localSkipReason } from '@istio-cni/capture';
import { AgentUnreachableError, type AgentClient } from './agentClient.ts';
import type { DegradedOutcome } from './degraded/degradedMode.ts';

export interface PluginDeps {
  agentFor(config: PluginConfig): AgentClient;
  logger: Logger;
  /** Called once the netconf is parsed, so logging can follow `plugin_log_level` and the run dir. */
  onConfig?(config: PluginConfig): void;
  /** What ADD and CHECK do when the agent is unreachable (docs/architecture.md "Degraded mode"). */
  degraded?: DegradedRunner;
}

export interface DegradedRunner {
  add(config: PluginConfig, k8s: K8sArgs, netns: string, podIps: readonly string[], log: Logger): Promise<DegradedOutcome>;
  check(config: PluginConfig, k8s: K8sArgs, netns: string): Promise<void>;
  /** `undefined` when degraded mode could serve ADDs now; otherwise why not. */
  status(config: PluginConfig): Promise<string | undefined>;
}

/** Why an invocation is answered without asking the agent, or `undefined` when the agent decides. */
export function skipReason(k8s: K8sArgs, config: PluginConfig): string | undefined {
  return localSkipReason(k8s.podName, k8s.podNamespace, localPolicyOf(config));
}

function prevResultIps(conf: NetConf): PodIp[] {
  return (conf.prevResult?.ips ?? []).map((ip) => {
    const out: PodIp = { address: ip.address };
    if (ip.gateway) out.gateway = ip.gateway;
    if (ip.interface !== undefined) out.interface = ip.interface;
    return out;
  });
}

export function handoffRequest(command: HandoffCommand, args: CmdArgs, conf: NetConf, k8s: K8sArgs): HandoffRequest {
  const request: HandoffRequest = {
    protocol: PROTOCOL,
    command,
    cniVersion: conf.cniVersion,
    containerId: args.containerId,
    netns: args.netns,
    ifName: args.ifName,
    pod: {
      name: k8s.podName,
      namespace: k8s.podNamespace,
      uid: k8s.podUid,
      infraContainerId: k8s.podInfraContainerId,
    },
    ips: prevResultIps(conf),
  };
  if (command === 'GC') request.validAttachments = validAttachments(conf);
  return request;
}

/** Pass-through output: `prevResult` in the netconf's version, or an empty result of that version. */
export function passThrough(conf: NetConf): Record<string, unknown> {
  return conf.prevResult ? encodeResult(conf.prevResult, conf.cniVersion) : emptyResult(conf.cniVersion);
}

async function askAgent(agent: AgentClient, request: HandoffRequest): Promise<HandoffVerdict> {
  const response = await agent.call(request);
  if (isFailure(response)) {
    throw new CniError(response.error.code, response.error.msg, response.error.details ?? '');
  }
  return response;
}

export function createPluginFuncs(deps: PluginDeps): PluginFuncs {
  const prepare = (args: CmdArgs, conf: NetConf) => {
    const config = parsePluginConfig(conf);
    deps.onConfig?.(config);
    const k8s = parseK8sArgs(args.args);
    const log = deps.logger.with({
      pod: `${k8s.podNamespace}/${k8s.podName}`,
      containerID: args.containerId,
    });
    return { config, k8s, log };
  };

  return {
    async add(args, conf) {
      const { config, k8s, log } = prepare(args, conf);
      const skip = skipReason(k8s, config);
      if (skip) {
        log.debug('skipping pod', { reason: skip });
        return passThrough(conf);
      }
      try {
        const verdict = await askAgent(deps.agentFor(config), handoffRequest('ADD', args, conf, k8s));
        // The agent logs the decision with the pod's name; repeating it here would cost every ADD a
        // second round trip (the log sink) for nothing.
        log.debug('pod handled by agent', { verdict: verdict.verdict, reason: verdict.reason });
      } catch (err) {
        if (!(err instanceof AgentUnreachableError)) throw err;
        if (!deps.degraded) {
          throw new CniError(ErrorCode.TryAgainLater, 'istio-cni node agent is not reachable; retry once it is running', err.message);
        }
        log.warn('istio-cni node agent unreachable; deciding in the plugin', { error: err.message });
        const outcome = await deps.degraded.add(
          config,
          k8s,
          args.netns,
          prevResultIps(conf).map((ip) => ip.address),
          log,
        );
        log.info('pod handled in degraded mode', { ...outcome });
      }
      return passThrough(conf);
    },

    async del(args, conf) {
      // DEL is best effort: it must never wedge pod deletion (docs/architecture.md "Degraded mode").
      const { config, k8s, log } = prepare(args, conf);
      if (skipReason(k8s, config)) return;
      try {
        await askAgent(deps.agentFor(config), handoffRequest('DEL', args, conf, k8s));
      } catch (err) {
        log.warn('DEL not acknowledged by agent; ignoring', { error: (err as Error).message });
      }
    },

    async check(args, conf) {
      const { config, k8s, log } = prepare(args, conf);
      if (skipReason(k8s, config)) return;
      try {
        await askAgent(deps.agentFor(config), handoffRequest('CHECK', args, conf, k8s));
      } catch (err) {
        if (!(err instanceof AgentUnreachableError)) throw err;
        if (!deps.degraded) throw new CniError(ErrorCode.TryAgainLater, 'istio-cni node agent is not reachable', err.message);
        log.warn('istio-cni node agent unreachable; deciding in the plugin', { error: err.message });
        await deps.degraded.check(config, k8s, args.netns);
      }
    },

    async gc(args, conf) {
      const { config, log } = prepare(args, conf);
      try {
        await askAgent(deps.agentFor(config), handoffRequest('GC', args, conf, emptyK8sArgs()));
      } catch (err) {
        if (!(err instanceof AgentUnreachableError)) throw err;
        log.debug('agent not reachable during GC; nothing to collect here');
      }
    },

    async status(args, conf) {
      // docs/architecture.md "Degraded mode", STATUS. A runtime that calls STATUS (containerd 2.x)
      // reports the node NotReady on an error, and kubelet then starts no pod-network pod: not the
      // agent's either, which runs in a pod netns. So with no agent answering, 0: only kubelet can
      // bring it back, and an ADD meanwhile goes to degraded mode, which fails closed when it cannot
      // decide. An agent that runs but is not ready yet gets ready by itself: 0 only if degraded mode
      // could decide every pod meanwhile.
      const { config, log } = prepare(args, conf);
      let agentProblem: string;
      try {
        await askAgent(deps.agentFor(config), handoffRequest('STATUS', args, conf, emptyK8sArgs()));
        return;
      } catch (err) {
        if (err instanceof AgentUnreachableError) {
          log.debug('STATUS: agent not reachable; ready, so kubelet can start it', { error: err.message });
          return;
        }
        if (err instanceof CniError && err.code === ErrorCode.PluginNotAvailable)
          agentProblem = `istio-cni node agent is not ready: ${err.message}`;
        else throw err;
      }
      const degradedProblem = deps.degraded ? await deps.degraded.status(config) : 'degraded mode is not available';
      if (degradedProblem !== undefined) throw new CniError(ErrorCode.PluginNotAvailable, `${agentProblem}; ${degradedProblem}`);
      log.debug('STATUS: agent not ready, degraded mode can decide pods', { agent: agentProblem });
    },
  };
}

function emptyK8sArgs(): K8sArgs {
  return { podName: '', podNamespace: '', podUid: '', podInfraContainerId: '' };
}
