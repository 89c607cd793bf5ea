import { createJsonLogger } from '@istio-cni/handoff';
import type { BrokenPodFilter } from '../src/repair/detectBrokenPod.ts';
import type { ContainerStatus, RepairPod } from '../src/repair/repairPod.ts';

export const SIDECAR_ANNOTATION = 'sidecar.istio.io/status';
export const VALIDATION = 'istio-validation';
export const DIED = 'Died for some reason';

export const quietLogger = createJsonLogger({ scope: 'test', threshold: 'none', sink: () => {} });

export interface MakePodArgs {
  name: string;
  annotations?: Record<string, string>;
  labels?: Record<string, string>;
  initContainerStatus?: ContainerStatus;
  uid?: string;
  resourceVersion?: string;
  podIP?: string;
  nodeName?: string;
}

export function makePod(a: MakePodArgs): RepairPod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: a.name,
      namespace: 'default',
      uid: a.uid ?? `uid-${a.name}`,
      resourceVersion: a.resourceVersion ?? '7',
      ...(a.annotations ? { annotations: a.annotations } : {}),
      ...(a.labels ? { labels: a.labels } : {}),
    },
    spec: {
      nodeName: a.nodeName ?? 'node-a',
      initContainers: [{ name: VALIDATION }],
      containers: [{ name: 'app' }, { name: 'istio-proxy', args: ['proxy', 'sidecar'] }],
    },
    status: {
      ...(a.podIP ? { podIP: a.podIP } : {}),
      ...(a.initContainerStatus ? { initContainerStatuses: [a.initContainerStatus] } : {}),
    },
  };
}

const annotated = { [SIDECAR_ANNOTATION]: 'something' };

/** The pods of upstream's repair tests, by the same names. */
export const workingPod = makePod({
  name: 'WorkingPod',
  annotations: annotated,
  initContainerStatus: { name: VALIDATION, state: { terminated: { exitCode: 0, reason: 'Completed' } } },
});

export const workingPodDiedPreviously = makePod({
  name: 'WorkingPodDiedPreviously',
  annotations: annotated,
  initContainerStatus: {
    name: VALIDATION,
    state: { terminated: { exitCode: 0, reason: 'Completed' } },
    lastState: { terminated: { exitCode: 126, reason: 'Error', message: DIED } },
  },
});

export const brokenPodTerminating = makePod({
  name: 'BrokenPodTerminating',
  annotations: annotated,
  labels: { testlabel: 'true' },
  initContainerStatus: {
    name: VALIDATION,
    state: { terminated: { exitCode: 126, reason: 'Error', message: DIED } },
    lastState: { terminated: { exitCode: 126, reason: 'Error', message: DIED } },
  },
});

export const brokenPodWaiting = makePod({
  name: 'BrokenPodWaiting',
  annotations: annotated,
  initContainerStatus: {
    name: VALIDATION,
    state: { waiting: { reason: 'CrashLoopBackOff', message: 'Back-off 5m0s restarting failed container' } },
    lastState: { terminated: { exitCode: 126, reason: 'Error', message: DIED } },
  },
});

export const brokenPodNoAnnotation = makePod({
  name: 'BrokenPodNoAnnotation',
  initContainerStatus: {
    name: VALIDATION,
    state: { waiting: { reason: 'CrashLoopBackOff' } },
    lastState: { terminated: { exitCode: 126, reason: 'Error', message: DIED } },
  },
});

export function filter(over: Partial<BrokenPodFilter> = {}): BrokenPodFilter {
  return {
    sidecarAnnotation: SIDECAR_ANNOTATION,
    initContainerName: VALIDATION,
    initContainerTerminationMessage: '',
    initContainerExitCode: 126,
    ...over,
  };
}
