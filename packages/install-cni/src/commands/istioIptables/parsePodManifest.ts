import { parse as parseYaml } from 'yaml';
import type { Container, EnvVar, Pod } from '@istio-cni/capture';

/** Manifests beyond this are not pods anyone wrote by hand or got from the API. */
export const MAX_MANIFEST_BYTES = 1024 * 1024;

/** A pod manifest that cannot be read as a Pod; names the file and the field. */
export class PodManifestError extends Error {
  readonly code = 'ERR_ISTIO_IPTABLES_POD_MANIFEST';
  constructor(source: string, reason: string) {
    super(`failed to read pod manifest ${JSON.stringify(source)}: ${reason}`);
    this.name = 'PodManifestError';
  }
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Parses a pod manifest (YAML or JSON; JSON is YAML) into the Pod fields the plugin reads, checking
 * the type of every one of them so that `redirectFromPod` sees exactly what the API would give it.
 * Unknown fields are ignored, as the API client ignores them.
 */
export function parsePodManifest(text: string, source: string): Pod {
  if (Buffer.byteLength(text) > MAX_MANIFEST_BYTES) throw new PodManifestError(source, `larger than ${MAX_MANIFEST_BYTES} bytes`);
  let doc: unknown;
  try {
    // Alias expansion is capped so a small "billion laughs" document cannot exhaust memory.
    doc = parseYaml(text, { maxAliasCount: 100, prettyErrors: false });
  } catch (err) {
    throw new PodManifestError(source, `not YAML or JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  const fail = (reason: string): never => {
    throw new PodManifestError(source, reason);
  };
  if (!isObject(doc)) return fail('not an object');
  if (doc.kind !== undefined && doc.kind !== 'Pod') fail(`kind is ${JSON.stringify(doc.kind)}, not "Pod"`);
  if (!isObject(doc.metadata)) return fail('metadata is missing or not an object');
  const meta = doc.metadata;
  const spec = doc.spec === undefined || doc.spec === null ? {} : isObject(doc.spec) ? doc.spec : fail('spec is not an object');
  return {
    metadata: {
      ...optionalString(meta, 'name', 'metadata', fail),
      ...optionalString(meta, 'namespace', 'metadata', fail),
      labels: stringMap(meta.labels, 'metadata.labels', fail),
      annotations: stringMap(meta.annotations, 'metadata.annotations', fail),
    },
    spec: {
      containers: containers(spec.containers, 'spec.containers', fail),
      initContainers: containers(spec.initContainers, 'spec.initContainers', fail),
    },
  };
}

function optionalString(obj: Json, key: string, where: string, fail: (r: string) => never): Record<string, string> {
  const value = obj[key];
  if (value === undefined || value === null) return {};
  if (typeof value !== 'string') fail(`${where}.${key} is not a string`);
  return { [key]: value as string };
}

/** Labels and annotations are string maps; YAML readers often write `true` or `8080` unquoted, which the API refuses too. */
function stringMap(value: unknown, where: string, fail: (r: string) => never): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (!isObject(value)) return fail(`${where} is not a map`);
  const out: Record<string, string> = {};
  for (const [key, v] of Object.entries(value)) {
    if (typeof v !== 'string') fail(`${where}[${JSON.stringify(key)}] is not a string (quote it)`);
    out[key] = v as string;
  }
  return out;
}

function containers(value: unknown, where: string, fail: (r: string) => never): Container[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) return fail(`${where} is not a list`);
  return value.map((c: unknown, i) => {
    const at = `${where}[${i}]`;
    if (!isObject(c)) return fail(`${at} is not an object`);
    if (typeof c.name !== 'string') return fail(`${at}.name is not a string`);
    const container: { -readonly [K in keyof Container]: Container[K] } = { name: c.name };
    if (c.args !== undefined && c.args !== null) {
      if (!Array.isArray(c.args) || !c.args.every((a) => typeof a === 'string')) fail(`${at}.args is not a list of strings`);
      container.args = c.args as string[];
    }
    if (c.env !== undefined && c.env !== null) container.env = envList(c.env, `${at}.env`, fail);
    if (c.securityContext !== undefined && c.securityContext !== null) {
      if (!isObject(c.securityContext)) fail(`${at}.securityContext is not an object`);
      const sc = c.securityContext as Json;
      container.securityContext = {
        ...id(sc.runAsUser, 'runAsUser', `${at}.securityContext`, fail),
        ...id(sc.runAsGroup, 'runAsGroup', `${at}.securityContext`, fail),
      };
    }
    return container;
  });
}

function envList(value: unknown, where: string, fail: (r: string) => never): EnvVar[] {
  if (!Array.isArray(value)) return fail(`${where} is not a list`);
  return value.map((e: unknown, i) => {
    if (!isObject(e) || typeof e.name !== 'string') return fail(`${where}[${i}].name is not a string`);
    // valueFrom (field refs, secrets) cannot be resolved from a file; like an absent value it reads as "".
    if (e.value === undefined || e.value === null) return { name: e.name };
    if (typeof e.value !== 'string') return fail(`${where}[${i}].value is not a string (quote it)`);
    return { name: e.name, value: e.value };
  });
}

function id(value: unknown, key: 'runAsUser' | 'runAsGroup', where: string, fail: (r: string) => never): { [k: string]: number } {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0 || value > 0xffffffff) {
    return fail(`${where}.${key} is not an integer 0-4294967295`);
  }
  return { [key]: value };
}
