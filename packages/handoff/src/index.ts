export * from './protocol.ts';
export * from './paths.ts';
export * from './jsonLog.ts';
export * from './udsHttpClient.ts';
export { VERSION } from './version.ts';
export * from './pluginConfig.ts';
