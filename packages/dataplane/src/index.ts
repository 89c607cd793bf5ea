export { DataplaneError, type DataplaneErrorCode } from './dataplaneError.ts';
export {
  CommandError,
  type CommandErrorDetails,
  type CommandResult,
  type CommandRunner,
  type RunOptions,
  xtablesExitMessage,
} from './commandRunner.ts';
export { createExecCommandRunner, type ExecCommandRunnerOptions } from './execCommandRunner.ts';
export {
  createRecordingCommandRunner,
  type RecordedCall,
  type RecordingCommandRunner,
  type RecordingResponder,
} from './recordingCommandRunner.ts';
export { createScratchNetnsOpener, type OpenScratchNetns, type ScratchNetns, type ScratchNetnsOptions, withScratchNetns } from './scratchNetns.ts';
export {
  detectIptablesBackend,
  type DetectIptablesBackendOptions,
  hasIptablesRules,
  type IpFamily,
  type IptablesBackend,
  type IptablesBinaries,
  iptablesBinaries,
  type IptablesFlavor,
  type IptablesVersion,
  parseIptablesVersion,
  versionAtLeast,
} from './detectIptablesBackend.ts';
export {
  diffIptablesState,
  type IptablesState,
  type IptablesStateDiff,
  type IptablesTable,
  isIstioChain,
  jumpTarget,
  parseIptablesSave,
} from './iptablesState.ts';
export { parseRestoreDocument, renderRestoreDocument, type RestoreTableBlock } from './restoreDocument.ts';
export { buildIptablesReconcileDocument } from './buildIptablesReconcileDocument.ts';
export {
  applyIptablesRules,
  type ApplyIptablesResult,
  type ApplyIptablesRulesOptions,
  type ApplyOutcome,
  canonicalIptablesState,
  type IptablesDeps,
  type IptablesDocuments,
  readIptablesState,
  verifyIptablesRules,
  type VerifyIptablesRulesOptions,
  xtablesRunOptions,
} from './applyIptablesRules.ts';
export { applyNftRules, type ApplyNftRulesOptions, type NftDeps, nftScriptTables, verifyNftRules, type VerifyNftRulesOptions } from './applyNftRules.ts';
export { detectPodIpv6, type InterfaceAddress, ipv6Enabled, parseIpAddrJson } from './detectPodIpv6.ts';
export { configureTproxyRoutes, type TproxyRouteOptions } from './configureTproxyRoutes.ts';
export {
  applySidecarCapture,
  type ApplySidecarCaptureOptions,
  type SidecarCaptureDeps,
  type SidecarCaptureResult,
  type SidecarRulePlan,
  verifySidecarCapture,
  type VerifySidecarCaptureOptions,
} from './applySidecarCapture.ts';
export { planSidecarCapture, type PlanSidecarCaptureOptions } from './planSidecarCapture.ts';
export { createSidecarCaptureManager, type SidecarCaptureManager, type SidecarCaptureManagerOptions } from './sidecarCaptureManager.ts';
export * from './ambient/index.ts';
