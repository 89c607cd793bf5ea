export { SUPPORTED_VERSIONS, LATEST_VERSION, versionInfo, type VersionInfo } from './versions.ts';
export { ErrorCode, type ErrorCodeValue } from './errorCode.ts';
export { CniError, type CniErrorJson } from './cniError.ts';
export { COMMANDS, requiredEnv, cmdArgsFromEnv, type Command, type CmdArgs } from './cmdArgs.ts';
export { parseNetConf, type NetConf, type ParseNetConfOptions } from './parseNetConf.ts';
export { parseConfList, type ConfList } from './parseConfList.ts';
export { parseK8sArgs, type K8sArgs } from './parseK8sArgs.ts';
export type { Result, ResultInterface, ResultIPConfig, ResultRoute, ResultDNS } from './result.ts';
export { parseResult, resultFamily, RESULT_FAMILIES, type ResultFamily } from './parseResult.ts';
export { encodeResult, emptyResult } from './encodeResult.ts';
export { validAttachments, VALID_ATTACHMENTS_KEY, type Attachment } from './validAttachments.ts';
export { validateContainerId, validateInterfaceName, validateNetworkName } from './validateNames.ts';
export { parseVersion, versionAtLeast, type ParsedVersion } from './parseVersion.ts';
export { dispatch, type PluginFuncs, type DispatchOutcome, type DispatchOptions } from './dispatch.ts';
export { formatIPv6Groups, parseCidr, parseIpAddress, quoteForError, type Cidr, type IpAddress, type IpFamily } from './ipAddress.ts';
export {
  goConfigFileText,
  goMarshal,
  goMarshalIndent,
  isJsonObject,
  parseJson,
  type GoMarshalIndentOptions,
  type JsonObject,
  type JsonValue,
} from './goJson.ts';
export { errorMessage } from './errorMessage.ts';
