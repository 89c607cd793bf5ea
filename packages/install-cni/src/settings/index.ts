export * from './settings.ts';
export * from './parseValues.ts';
export * from './checkPaths.ts';
export { SETTING_SPECS, flagName } from './settingSpecs.ts';
