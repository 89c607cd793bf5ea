/**
 * The sidecar-capture subset of the dataplane, for the plugin's degraded mode: no ZDS, protobuf
 * or FFI code behind this entry, so the plugin bundle stays small.
 */
export { createExecCommandRunner } from './execCommandRunner.ts';
export { createNetnsOwnerOpener, type NsIoctl } from './netnsOwnerUserns.ts';
export { createScratchNetnsOpener } from './scratchNetns.ts';
export { createSidecarCaptureManager, type SidecarCaptureManager } from './sidecarCaptureManager.ts';
export { createPodNetnsGuard, type PodNetnsGuard, PodNetnsRefusedError } from './podNetnsGuard.ts';
