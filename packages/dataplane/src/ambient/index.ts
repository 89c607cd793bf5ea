export { AmbientDataplaneError, type AmbientDataplaneErrorCode } from './ambientDataplaneError.ts';
export { createNetnsHandle, type NetnsHandle, type NetnsHandleInit, openNetnsHandle } from './netnsHandle.ts';
export { openCniNetns } from './openCniNetns.ts';
export { createProcFs, type ProcFs, type ProcFsEntry } from './procFs.ts';
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
  type ScanLog,
} from './podNetnsProcFinder.ts';
export { addressesContainAny, createNetnsOwnershipCheck, listNetnsAddresses } from './netnsOwnership.ts';
export { checkPodUid, type PodAddress, parsePodAddress } from './podAddress.ts';
export { createPodNetnsCache, type PodNetnsCache, type PodSnapshotEntry, type WorkloadInfo } from './podNetnsCache.ts';
