/**
 * The plugin → agent hand-off protocol (docs/handoff.md).
 *
 * One HTTP/1.1 request per CNI invocation over `<run>/pluginevent.sock`: `POST /v1/cni` with a JSON
 * {@link HandoffRequest}; the agent answers 200 with a {@link HandoffVerdict} or a non-2xx status with a
 * {@link HandoffFailure} whose CNI error the plugin prints unchanged.
 *
 * Skew rules (one version either way during a rolling upgrade):
 * - every message carries `protocol`; receivers ignore unknown fields;
 * - a newer sender only adds optional fields; a field's meaning never changes within a major version;
 * - the agent serves every request whose `protocol` is within [MIN_PROTOCOL, PROTOCOL] and answers
 *   other versions with CNI error 1 (incompatible version), which the plugin reports as such.
 */

import type { Attachment } from '@istio-cni/cni';

export const PROTOCOL = 1;
export const MIN_PROTOCOL = 1;
export const HANDOFF_PATH = '/v1/cni';
/** Kept well under the runtime's CNI timeout; the agent answers an ADD in milliseconds when healthy. */
export const HANDOFF_TIMEOUT_MS = 25_000;
/** Refuse request bodies larger than this (the plugin never sends more than a few KiB). */
export const MAX_REQUEST_BYTES = 1 << 20;

export type HandoffCommand = 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';
const COMMANDS: readonly HandoffCommand[] = ['ADD', 'DEL', 'CHECK', 'GC', 'STATUS'];

export interface PodRef {
  name: string;
  namespace: string;
  uid: string;
  infraContainerId: string;
}

export interface PodIp {
  /** `address/prefix`, as in a CNI result. */
  address: string;
  gateway?: string;
  interface?: number;
}

export interface HandoffRequest {
  protocol: number;
  command: HandoffCommand;
  cniVersion: string;
  containerId: string;
  netns: string;
  ifName: string;
  pod: PodRef;
  /** IPs of the primary network's result (`prevResult.ips`); the API has none yet at ADD time. */
  ips: PodIp[];
  /** GC only: `cni.dev/valid-attachments`. */
  validAttachments?: Attachment[];
}

export type Verdict = 'redirected' | 'enrolled' | 'skipped' | 'ok';
const VERDICTS: readonly Verdict[] = ['redirected', 'enrolled', 'skipped', 'ok'];

export interface HandoffVerdict {
  protocol: number;
  verdict: Verdict;
  /** Why, in a few words (e.g. the skip reason). */
  reason?: string;
}

export interface HandoffError {
  code: number;
  msg: string;
  details?: string;
}

export interface HandoffFailure {
  protocol: number;
  error: HandoffError;
}

export type HandoffResponse = HandoffVerdict | HandoffFailure;

export class ProtocolError extends Error {
  override name = 'ProtocolError';
}

type Json = Record<string, unknown>;

function isObject(v: unknown): v is Json {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function str(o: Json, key: string, where: string): string {
  const v = o[key];
  if (typeof v !== 'string') throw new ProtocolError(`${where}.${key} must be a string`);
  return v;
}

function optStr(o: Json, key: string, where: string): string | undefined {
  return o[key] === undefined || o[key] === null ? undefined : str(o, key, where);
}

function protocolOf(o: Json): number {
  const p = o.protocol;
  if (typeof p !== 'number' || !Number.isInteger(p) || p < 1) {
    throw new ProtocolError('protocol must be a positive integer');
  }
  return p;
}

function parsePodIp(v: unknown, i: number): PodIp {
  const where = `ips[${i}]`;
  if (!isObject(v)) throw new ProtocolError(`${where} must be an object`);
  const ip: PodIp = { address: str(v, 'address', where) };
  const gateway = optStr(v, 'gateway', where);
  if (gateway !== undefined) ip.gateway = gateway;
  if (v.interface !== undefined && v.interface !== null) {
    if (typeof v.interface !== 'number' || !Number.isInteger(v.interface) || v.interface < 0) {
      throw new ProtocolError(`${where}.interface must be a non-negative integer`);
    }
    ip.interface = v.interface;
  }
  return ip;
}

function parseAttachment(v: unknown, i: number): Attachment {
  const where = `validAttachments[${i}]`;
  if (!isObject(v)) throw new ProtocolError(`${where} must be an object`);
  return { containerId: str(v, 'containerId', where), ifName: str(v, 'ifName', where) };
}

/** Validates a decoded request body; unknown fields are ignored (skew rule). */
export function parseHandoffRequest(body: unknown): HandoffRequest {
  if (!isObject(body)) throw new ProtocolError('request must be a JSON object');
  const protocol = protocolOf(body);
  const command = body.command;
  if (typeof command !== 'string' || !(COMMANDS as readonly string[]).includes(command)) {
    throw new ProtocolError(`unknown command ${JSON.stringify(command)}`);
  }
  const pod = body.pod;
  if (!isObject(pod)) throw new ProtocolError('pod must be an object');
  const ips = body.ips ?? [];
  if (!Array.isArray(ips)) throw new ProtocolError('ips must be an array');
  const request: HandoffRequest = {
    protocol,
    command: command as HandoffCommand,
    cniVersion: str(body, 'cniVersion', 'request'),
    containerId: str(body, 'containerId', 'request'),
    netns: str(body, 'netns', 'request'),
    ifName: str(body, 'ifName', 'request'),
    pod: {
      name: str(pod, 'name', 'pod'),
      namespace: str(pod, 'namespace', 'pod'),
      uid: str(pod, 'uid', 'pod'),
      infraContainerId: str(pod, 'infraContainerId', 'pod'),
    },
    ips: ips.map(parsePodIp),
  };
  if (body.validAttachments !== undefined && body.validAttachments !== null) {
    if (!Array.isArray(body.validAttachments)) throw new ProtocolError('validAttachments must be an array');
    request.validAttachments = body.validAttachments.map(parseAttachment);
  }
  return request;
}

/** Validates a decoded response body from the agent. */
export function parseHandoffResponse(body: unknown): HandoffResponse {
  if (!isObject(body)) throw new ProtocolError('response must be a JSON object');
  const protocol = protocolOf(body);
  if (isObject(body.error)) {
    const e = body.error;
    if (typeof e.code !== 'number' || !Number.isInteger(e.code)) {
      throw new ProtocolError('error.code must be an integer');
    }
    const error: HandoffError = { code: e.code, msg: str(e, 'msg', 'error') };
    const details = optStr(e, 'details', 'error');
    if (details) error.details = details;
    return { protocol, error };
  }
  const verdict = body.verdict;
  if (typeof verdict !== 'string' || !(VERDICTS as readonly string[]).includes(verdict)) {
    throw new ProtocolError(`unknown verdict ${JSON.stringify(verdict)}`);
  }
  const out: HandoffVerdict = { protocol, verdict: verdict as Verdict };
  const reason = optStr(body, 'reason', 'response');
  if (reason) out.reason = reason;
  return out;
}

export function isFailure(r: HandoffResponse): r is HandoffFailure {
  return 'error' in r;
}

export function isSupportedProtocol(protocol: number): boolean {
  return protocol >= MIN_PROTOCOL && protocol <= PROTOCOL;
}
