export { AnnotationError } from './annotationError.ts';
export { ANNOTATION, LABEL } from './annotationNames.ts';
export { parseCidr, parseIpAddress } from './ipAddress.ts';
export type { Cidr, IpAddress, IpFamily } from './ipAddress.ts';
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
} from './parseValues.ts';
export type { Wildcard } from './parseValues.ts';
export { findProxyContainer, INIT_CONTAINER_NAME, PROXY_CONTAINER_NAME, proxyEnvironment } from './podTypes.ts';
export type { Container, EnvVar, Namespace, ObjectMeta, Pod, PodIP, PodSpec, PodStatus, SecurityContext } from './podTypes.ts';
export { ALWAYS_EXCLUDED_INBOUND_PORTS, redirectFromPod } from './redirectFromPod.ts';
export type { InterceptionMode, Redirect } from './redirectFromPod.ts';
export { captureConfigFromRedirect, DEFAULT_CAPTURE_CONFIG, DNS_PROXY_PORT, OUTBOUND_MARK } from './captureConfig.ts';
export type { CaptureConfig, CaptureEnvironment } from './captureConfig.ts';
export { BUILTIN_CHAINS, CHAIN } from './iptablesRule.ts';
export type { IptablesRule, IptablesRuleSet, IptablesTable } from './iptablesRule.ts';
export { buildSidecarIptablesRules } from './buildSidecarIptablesRules.ts';
export { iptablesRuleArgs, renderIptablesRestore } from './renderIptablesRestore.ts';
export { NFT_TABLES } from './nftRule.ts';
export type { NftChainSpec, NftRule, NftTable } from './nftRule.ts';
export { buildSidecarNftRules } from './buildSidecarNftRules.ts';
export { renderNftTransaction } from './renderNftTransaction.ts';
export { isAgentPod, isKubernetesPod, sidecarDecision } from './sidecarDecision.ts';
export type { SidecarDecision } from './sidecarDecision.ts';
export { localSkipReason, type LocalPolicy } from './localSkipReason.ts';
