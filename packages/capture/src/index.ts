export { AnnotationError } from './annotationError.ts';
export { ANNOTATION, LABEL } from './annotationNames.ts';
export {
  MAX_LIST_ITEMS,
  MAX_VALUE_LENGTH,
  parseCidrList,
  parseCidrListOrWildcard,
  parseGoBool,
  parseGroupList,
  parseGroupListOrWildcard,
  parseInterfaceList,
  parseInterfaceName,
  parseIpList,
  parseOwnerIdList,
  parsePort,
  parsePortList,
  parsePortListOrWildcard,
} from './parseAnnotationValues.ts';
export type { Wildcard } from './parseAnnotationValues.ts';
export { findProxyContainer, INIT_CONTAINER_NAME, PROXY_CONTAINER_NAME, proxyEnvironment } from './podTypes.ts';
export type { Container, EnvVar, Namespace, ObjectMeta, Pod, PodIP, PodSpec, PodStatus, SecurityContext } from './podTypes.ts';
export { ALWAYS_EXCLUDED_INBOUND_PORTS, redirectFromPod } from './redirectFromPod.ts';
export type { InterceptionMode, Redirect } from './redirectFromPod.ts';
export {
  captureConfigFromRedirect,
  captureEnvironmentFrom,
  DEFAULT_CAPTURE_CONFIG,
  DNS_PROXY_PORT,
  OUTBOUND_MARK,
} from './captureConfig.ts';
export type { CaptureConfig, CaptureEnvironment } from './captureConfig.ts';
export { BUILTIN_CHAINS, CHAIN } from './iptablesRule.ts';
export type { IptablesRule, IptablesRuleSet, IptablesTable } from './iptablesRule.ts';
export { buildSidecarIptablesRules } from './buildSidecarIptablesRules.ts';
export { iptablesRuleArgs, renderIptablesRestore } from './renderIptablesRestore.ts';
export { NFT_TABLES } from './nftRule.ts';
export { NFT_TABLE_NAMES, type NftChainSpec, type NftRule, type NftTable } from './nftRule.ts';
export { buildSidecarNftRules } from './buildSidecarNftRules.ts';
export { renderNftTransaction } from './renderNftTransaction.ts';
export { isAgentPod, isKubernetesPod, sidecarDecision } from './sidecarDecision.ts';
export type { SidecarDecision } from './sidecarDecision.ts';
export { localSkipReason, type LocalPolicy } from './localSkipReason.ts';
export { captureFailure, decidePod, missingRulesFailure } from './podDecision.ts';
export type { AmbientSelection, FoundPod, PodDecision, PodDecisionInput, PodFailure, PodLookupNeeded } from './podDecision.ts';
export {
  ambientEnabledFor,
  DEFAULT_ENABLEMENT_SELECTORS,
  labelSelectorMatches,
  namespaceSelectedForAmbient,
  parseEnablementSelectors,
  type EnablementSelector,
  type LabelSelector,
  type LabelSelectorRequirement,
} from './enablementSelectors.ts';
export { SIDECAR_NFT_LAYOUT } from './nftRule.ts';
export type { NftLayout, NftTableLayout } from './nftRule.ts';
export {
  AMBIENT,
  AMBIENT_CHAIN,
  AmbientConfigError,
  ambientConfigFromOptions,
  ambientProbeSetName,
  DEFAULT_HOST_PROBE_SNAT_IP,
  DEFAULT_HOST_PROBE_SNAT_IPV6,
} from './ambientConfig.ts';
export type { AmbientConfig, AmbientOptions } from './ambientConfig.ts';
export {
  AMBIENT_ANNOTATION,
  ambientPodOverrides,
  ambientRedirectDns,
  DEFAULT_AMBIENT_POD_OVERRIDES,
} from './ambientPodOverrides.ts';
export type { AmbientPodOverrides, AmbientPodOverridesResult, PodDnsOverride } from './ambientPodOverrides.ts';
export { buildAmbientPodIptablesRules } from './buildAmbientPodIptablesRules.ts';
export { buildAmbientHostIptablesRules } from './buildAmbientHostIptablesRules.ts';
export { ambientHostIptablesDeletePlan, ambientPodIptablesDeletePlan } from './ambientIptablesDeletePlan.ts';
export type { AmbientIptablesDeletePlan } from './ambientIptablesDeletePlan.ts';
export { ambientPodRoutes, ipRouteArgs, ipRuleArgs } from './ambientPodRoutes.ts';
export type { AmbientLoopbackRoute, AmbientMarkIpRule, AmbientPodRoutes, AmbientPodRoutesOptions } from './ambientPodRoutes.ts';
export { buildAmbientPodNftRules } from './buildAmbientPodNftRules.ts';
export { buildAmbientHostNftRules } from './buildAmbientHostNftRules.ts';
export {
  AMBIENT_HOST_NFT_LAYOUT,
  AMBIENT_POD_NFT_LAYOUT,
  ambientHostNftRulesDeleteScript,
  ambientPodNftDeleteScript,
  ambientProbeSetElementScript,
  ambientProbeSetsCreateScript,
  ambientProbeSetsDestroyScript,
  ambientProbeSetsFlushScript,
  renderAmbientHostNftTransaction,
  renderAmbientPodNftTransaction,
} from './ambientNftScripts.ts';
