import { goAtoi, goQuote } from './goText.ts';

/** A spec version split into numbers. */
export interface ParsedVersion {
  major: number;
  minor: number;
  micro: number;
}

/** `version.ParseVersion`: throws an Error with the reference library's text on bad input. */
export function parseVersion(version: string): ParsedVersion {
  if (version === '') throw new Error(`invalid version ${goQuote(version)}: the version is empty`);
  const parts = version.split('.');
  if (parts.length >= 4) throw new Error(`invalid version ${goQuote(version)}: too many parts`);
  const names = ['major', 'minor', 'micro'];
  const numbers = [0, 0, 0];
  parts.forEach((part, i) => {
    const n = goAtoi(part);
    if ('error' in n) throw new Error(`failed to convert ${names[i]} version part ${goQuote(part)}: ${n.error}`);
    numbers[i] = n.value;
  });
  return { major: numbers[0] ?? 0, minor: numbers[1] ?? 0, micro: numbers[2] ?? 0 };
}

/** `version.GreaterThanOrEqualTo`: is `version` >= `other`? Throws on unparsable input. */
export function versionAtLeast(version: string, other: string): boolean {
  const a = parseVersion(version);
  const b = parseVersion(other);
  if (a.major !== b.major) return a.major > b.major;
  if (a.minor !== b.minor) return a.minor > b.minor;
  return a.micro >= b.micro;
}
