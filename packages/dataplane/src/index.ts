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
export { openNetnsOwnerUserns } from './netnsOwnerKoffi.ts';
export { createNetnsOwnerOpener, type NetnsOwnerOpener, type NsIoctl } from './netnsOwnerUserns.ts';
export {
  createRecordingCommandRunner,
  type RecordedCall,
  type RecordingCommandRunner,
  type RecordingResponder,
} from './recordingCommandRunner.ts';
export {
  createScratchNetnsOpener,
  type OpenScratchNetns,
  type ScratchNetns,
  type ScratchNetnsOptions,
  withScratchNetns,
} from './scratchNetns.ts';
export { choosePodIptablesBackend, type PodIptablesBackend, removeIstioIptablesState } from './choosePodIptablesBackend.ts';
export {
  classifyIptablesSave,
  decideIptablesBackend,
  detectIptablesBackend,
  type DetectIptablesBackendOptions,
  type IptablesBackendDecision,
  type IptablesContents,
  hasIptablesRules,
  type IptablesFamily,
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
  type IptablesChainRules,
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
export {
  applyNftRules,
  type ApplyNftRulesOptions,
  listTable,
  type NftDeps,
  nftScriptTables,
  readNftTables,
  verifyNftRules,
  type VerifyNftRulesOptions,
} from './applyNftRules.ts';
export {
  detectPodIpv6,
  type InterfaceAddress,
  ipv6Enabled,
  ipv6EnabledFromResultIps,
  parseIpAddrJson,
  uncapturedIpv6,
  uncapturedIpv6Warning,
} from './detectPodIpv6.ts';
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
export {
  createPodNetnsGuard,
  type NetnsReferences,
  type NsFileFacts,
  type NsIdentity,
  type PodNetnsGuard,
  type PodNetnsGuardOptions,
  PodNetnsRefusedError,
  podNetnsRefusal,
  resolveCniNetnsPath,
} from './podNetnsGuard.ts';
export * from './ambient/index.ts';
export { SeqpacketError, type SeqpacketErrorCode } from './seqpacket/seqpacketError.ts';
export {
  closeFd,
  connectSeqpacket,
  duplicateFd,
  type ReceivedPacket,
  type ReceiveOptions,
  type SendOptions,
  seqpacketPair,
  SeqpacketSocket,
} from './seqpacket/seqpacketSocket.ts';
export { type ListenSeqpacketOptions, listenSeqpacket, type SeqpacketListener } from './seqpacket/seqpacketListener.ts';
export { KOFFI_SEA_ASSET, loadKoffi } from './seqpacket/loadKoffi.ts';
export { trimMallocArenas } from './seqpacket/libc.ts';
export {
  describeNftTable,
  findPrefixedNftTables,
  isOwnNftTable,
  type NftFamily,
  type NftTableRef,
  nftTableKey,
  parseNftChainTables,
  parseNftTableHeaders,
  removeNftTables,
  removeOwnNftTable,
} from './nftTableList.ts';
export { type SidecarRuleKind, sidecarRulesHeldIn } from './sidecarRulesHeldIn.ts';
export { decideNativeNftables, holdsNftHostTable, NFT_HOST_TABLE, type NftablesDecision, tooOldNftVersion } from './nftCapabilities.ts';
export { defaultPeerUids, type PeerCredentials, peerCredentials, refusedPeer } from './seqpacket/peerCredentials.ts';
export {
  decodeWorkloadRequest,
  decodeWorkloadResponse,
  decodeZdsHello,
  encodeWorkloadRequest,
  encodeWorkloadResponse,
  encodeZdsHello,
  type WorkloadRequest,
  type WorkloadResponse,
  ZDS_VERSION,
  type ZdsHello,
  zdsRoot,
  type ZdsWorkloadInfo,
} from './zds/zdsSchema.ts';
export { ZdsError, type ZdsErrorCode } from './zds/zdsError.ts';
export {
  type PodSnapshotEntry,
  type PodSnapshotSource,
  silentZdsLogger,
  type WorkloadInfo,
  type ZdsLogger,
} from './zds/podSnapshotSource.ts';
export { createZtunnelServer, type RequestOptions, type ZtunnelServer, type ZtunnelServerOptions } from './zds/createZtunnelServer.ts';
export {
  type AmbientEnrolmentState,
  compareAmbientEnrolment,
  compareIptablesCapture,
  compareNftCapture,
  type Drift,
  type DriftKind,
  hasIstioIptablesState,
  type IptablesCaptureState,
  type NftCaptureState,
} from './captureDrift.ts';
export {
  type InspectCaptureOptions,
  type InspectedCapture,
  inspectCapture,
  iptablesFamiliesRead,
  readFromNfTables,
} from './inspectCapture.ts';
export { createNftGenerationReader, type NftGenerationReader } from './nftGeneration.ts';
export {
  createLegacyTablesFingerprinter,
  type LegacyTablesFingerprinter,
  zeroEntryCounters,
} from './legacyTablesFingerprint.ts';
