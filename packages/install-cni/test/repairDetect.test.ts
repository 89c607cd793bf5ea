import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isBrokenPod } from '../src/repair/detectBrokenPod.ts';
import {
  SIDECAR_ANNOTATION,
  VALIDATION,
  brokenPodNoAnnotation,
  brokenPodTerminating,
  brokenPodWaiting,
  filter,
  makePod,
  workingPod,
  workingPodDiedPreviously,
} from './repairFixtures.ts';

function detectPod(name: string, terminationMessage: string, exitCode: number) {
  return makePod({
    name,
    annotations: { [SIDECAR_ANNOTATION]: 'something' },
    initContainerStatus: {
      name: VALIDATION,
      state: { waiting: { reason: 'CrashLoopBackOff', message: 'Back-off 5m0s restarting failed blah blah blah' } },
      lastState: { terminated: { message: terminationMessage, exitCode } },
    },
  });
}

const cases = [
  { name: 'OK pod with only the exit-code check', f: filter(), pod: workingPod, want: false },
  {
    name: 'working pod that died previously (completed now) with only the exit-code check',
    f: filter(),
    pod: workingPodDiedPreviously,
    want: false,
  },
  { name: 'broken pod in waiting state with only the exit-code check', f: filter(), pod: brokenPodWaiting, want: true },
  { name: 'broken pod in terminated state with only the exit-code check', f: filter(), pod: brokenPodTerminating, want: true },
  { name: 'broken pod with the wrong exit code', f: filter({ initContainerExitCode: 55 }), pod: brokenPodWaiting, want: false },
  { name: 'broken pod without the sidecar annotation is ignored', f: filter(), pod: brokenPodNoAnnotation, want: false },
  {
    name: 'termination message mismatch',
    f: filter({ initContainerExitCode: 0, initContainerTerminationMessage: 'Termination Message' }),
    pod: detectPod('TerminationMessageMatchFalse', 'This Does Not Match', 0),
    want: false,
  },
  {
    name: 'termination message match',
    f: filter({ initContainerExitCode: 0, initContainerTerminationMessage: 'Termination Message' }),
    pod: detectPod('TerminationMessageMatchTrue', 'Termination Message', 0),
    want: true,
  },
  {
    name: 'termination message match with leading and trailing space trimmed',
    f: filter({ initContainerExitCode: 0, initContainerTerminationMessage: '            Termination Message' }),
    pod: detectPod('TerminationMessageMatchTrueLeadingSpace', 'Termination Message              ', 0),
    want: true,
  },
  { name: 'termination code mismatch', f: filter(), pod: detectPod('TerminationCodeMatchFalse', '', 121), want: false },
  { name: 'termination code match', f: filter(), pod: detectPod('TerminationCodeMatchTrue', '', 126), want: true },
  {
    name: 'badly formatted pod (empty container status)',
    f: filter(),
    pod: makePod({ name: 'Test', annotations: { [SIDECAR_ANNOTATION]: 'x' }, initContainerStatus: { name: '' } }),
    want: false,
  },
  {
    name: 'pod without any init container status',
    f: filter(),
    pod: makePod({ name: 'NoStatus', annotations: { [SIDECAR_ANNOTATION]: 'x' } }),
    want: false,
  },
  {
    name: 'message and code must both match',
    f: filter({ initContainerTerminationMessage: 'Died for some reason' }),
    pod: detectPod('BothFilters', 'Died for some reason', 1),
    want: false,
  },
  { name: 'empty annotation filter checks every pod', f: filter({ sidecarAnnotation: '' }), pod: brokenPodNoAnnotation, want: true },
  {
    name: 'another init container is not looked at when a name is set',
    f: filter(),
    pod: makePod({
      name: 'OtherInit',
      annotations: { [SIDECAR_ANNOTATION]: 'x' },
      initContainerStatus: { name: 'istio-init', lastState: { terminated: { exitCode: 126 } } },
    }),
    want: false,
  },
  {
    name: 'empty init container name filter looks at every init container',
    f: filter({ initContainerName: '' }),
    pod: makePod({
      name: 'AnyInit',
      annotations: { [SIDECAR_ANNOTATION]: 'x' },
      initContainerStatus: { name: 'istio-init', lastState: { terminated: { exitCode: 126 } } },
    }),
    want: true,
  },
  {
    name: 'a current failure without a previous termination is not broken yet',
    f: filter(),
    pod: makePod({
      name: 'FirstFailure',
      annotations: { [SIDECAR_ANNOTATION]: 'x' },
      initContainerStatus: { name: VALIDATION, state: { terminated: { exitCode: 126, reason: 'Error' } } },
    }),
    want: false,
  },
];

for (const c of cases) {
  test(`isBrokenPod: ${c.name}`, () => {
    assert.equal(isBrokenPod(c.pod, c.f), c.want);
  });
}
