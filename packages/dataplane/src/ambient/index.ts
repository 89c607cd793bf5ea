export { AmbientDataplaneError, type AmbientDataplaneErrorCode } from './ambientDataplaneError.ts';
export { createNetnsHandle, type NetnsHandle, type NetnsHandleInit, openNetnsHandle } from './netnsHandle.ts';
export { createProcFs, type ProcFs } from './procFs.ts';
export {
  type Cgroup,
  type CgroupPodIdentity,
  parseProcCgroup,
  parseProcStarttime,
  podIdentityFromCgroupPath,
  podIdentityFromCgroups,
} from './parseProcCgroup.ts';
export {
  type AmbientPod,
  createPodNetnsProcFinder,
  type FoundPodNetns,
  type NetnsOwnershipCheck,
  type PodNetnsProcFinder,
  type PodNetnsProcFinderOptions,
} from './podNetnsProcFinder.ts';
export type { ScanLog } from './procScan.ts';
export {
  createPodProcessNetnsLocator,
  shareProcessScan,
  type SharedProcessScan,
  type PodProcessNetns,
  type PodProcessNetnsLocator,
  type PodProcessNetnsLocatorOptions,
} from './podProcessNetns.ts';
export { findNetnsByIp, type FindNetnsByIpOptions } from './findNetnsByIp.ts';
export { createNetnsDir, isNetnsFileName, type NetnsDir, type NetnsDirEntry } from './netnsDir.ts';
export { type NetnsAddressLister, type NetnsDirSource, searchNetnsDir } from './netnsDirSearch.ts';
export { addressesContainAny, createNetnsOwnershipCheck, listNetnsAddresses } from './netnsOwnership.ts';
export { checkPodUid, type PodAddress, parsePodAddress } from './podAddress.ts';
export { createPodNetnsCache, type PodNetnsCache, type PodSnapshotEntry, type WorkloadInfo } from './podNetnsCache.ts';
export {
  type AmbientPodRulePlan,
  type AmbientPodRulesOptions,
  type AmbientPodRulesResult,
  type AmbientRuleBackend,
  type AmbientRulesDeps,
  applyAmbientPodRules,
  deleteAmbientPodRules,
  type NetnsTarget,
  planAmbientPodRules,
  verifyAmbientPodRules,
  withNetnsPath,
} from './ambientPodRules.ts';
export type { ProbeSetEntry, ProbeSetManager, RemovePodResult } from './probeSets.ts';
export { createIpsetProbeSets, type IpsetProbeSetsOptions, parseIpsetSave } from './ipsetProbeSets.ts';
export { createNftProbeSets, type NftProbeSetsOptions, parseNftSetJson } from './nftProbeSets.ts';
export { syncProbeSets, type SyncProbeSetsResult } from './syncProbeSets.ts';
export { findKubeletUid } from './findKubeletUid.ts';
export {
  type AmbientHostRulesOptions,
  createAmbientHostRules,
  deleteAmbientHostRules,
  verifyAmbientHostRules,
} from './ambientHostRules.ts';
export {
  type BranchEniRoute,
  type HostRoute,
  type IifRule,
  iifRulesByTable,
  matchBranchEniRoute,
  parseHostRoutes,
  parseIifRules,
} from './branchEniRoute.ts';
export {
  BRANCH_ENI_FORWARD_PRIORITY,
  type BranchEniRulePlan,
  type IpRuleSelector,
  ipRuleArgv,
  planBranchEniRules,
} from './branchEniRules.ts';
export {
  type BranchEniLog,
  type BranchEniOutcome,
  type BranchEniProbeRules,
  type BranchEniProbeRulesOptions,
  createBranchEniProbeRules,
} from './branchEniProbeRules.ts';
