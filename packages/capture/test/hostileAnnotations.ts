/**
 * Annotation values that must never reach rule text: shell and iptables/nft injection attempts,
 * control characters, malformed numbers and addresses, oversized lists. Every entry must be
 * rejected by `redirectFromPod` with an AnnotationError naming the annotation.
 */
export interface HostileAnnotation {
  readonly annotation: string;
  readonly value: string;
}

const PORT_ANNOTATIONS = [
  'traffic.sidecar.istio.io/includeInboundPorts',
  'traffic.sidecar.istio.io/excludeInboundPorts',
  'traffic.sidecar.istio.io/includeOutboundPorts',
  'traffic.sidecar.istio.io/excludeOutboundPorts',
];
const CIDR_ANNOTATIONS = ['traffic.sidecar.istio.io/includeOutboundIPRanges', 'traffic.sidecar.istio.io/excludeOutboundIPRanges'];
const INTERFACE_ANNOTATIONS = [
  'traffic.sidecar.istio.io/excludeInterfaces',
  'traffic.sidecar.istio.io/kubevirtInterfaces',
  'istio.io/reroute-virtual-interfaces',
];
const MODE_ANNOTATION = 'sidecar.istio.io/interceptionMode';
const ALL_ANNOTATIONS = [...PORT_ANNOTATIONS, ...CIDR_ANNOTATIONS, ...INTERFACE_ANNOTATIONS, MODE_ANNOTATION];

/** Invalid for every annotation kind. */
const COMMON_VALUES = [
  '-j ACCEPT',
  '80 -j ACCEPT',
  '10.0.0.0/8 -j ACCEPT',
  'eth0 -j ACCEPT',
  '; reboot',
  '80;reboot',
  'eth0;flush ruleset',
  '$(reboot)',
  '`reboot`',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the literal text of a shell expansion is the hostile value
  '${IFS}',
  '"eth0"',
  "'eth0'",
  'eth0\n-A OUTPUT -j ACCEPT',
  '80\nCOMMIT',
  'eth0\r',
  '8\t0',
  'a\u0000b',
  'lo{}',
  'a|b',
  'a&b',
  'x>y',
  '#comment',
  '*;',
  'eth0,-j ACCEPT',
  '80,81 -j DROP',
  '--dport 22',
  'eth０',
  'a'.repeat(10000),
  Array.from({ length: 300 }, () => '1').join(','),
  '%0a',
];

const PORT_VALUES = [
  '65536',
  '-1',
  '1e3',
  '0x50',
  '80.0',
  '80,,81',
  '80,',
  ',80',
  '+80',
  '８０',
  '99999999999999999999',
  'NaN',
  'Infinity',
  '*,80',
  '80-90',
  '80:90',
  '80 81',
];
/** `*` is accepted upstream here but would produce `--dport *`; we reject it. */
const PORT_NO_WILDCARD_ANNOTATIONS = PORT_ANNOTATIONS.filter((a) => !a.endsWith('/includeInboundPorts'));

const CIDR_VALUES = [
  '10.0.0.0/33',
  '10.0.0.0',
  '10.0.0.256/8',
  '010.0.0.0/8',
  '10.0.0.0/08',
  '::/129',
  'fe80::1%eth0/64',
  '1.2.3.4/ 8',
  ' 1.2.3.4/8',
  '10.0.0.0/8,',
  '*,10.0.0.0/8',
  '1:2:3:4:5:6:7:8:9/64',
  ':::/0',
  '1::2::3/64',
  'gggg::/16',
  '10.0.0.0/-1',
  '10.0.0.0/8/8',
  'localhost/8',
  '0x0a000000/8',
  '10.0.0.0/8, 10.1.0.0/16',
  Array.from({ length: 300 }, () => '10.0.0.0/8').join(','),
];

const INTERFACE_VALUES = [
  'a'.repeat(16),
  '.',
  '..',
  'eth0:1',
  'eth 0',
  'eth/0',
  '-eth0',
  'eth0,..',
  'ｅｔｈ0',
  'eth0,eth1:0',
  // Outside upstream's `ValidateInterfaceNames` set: a letter first, no '@', no empty item.
  '0eth',
  '_eth0',
  '@eth0',
  'eth0@if3',
  'eth0,,eth1',
  'eth0,',
  ',eth0',
  ' , ',
  Array.from({ length: 300 }, (_, i) => `eth${i}`).join(','),
];

const MODE_VALUES = ['redirect', 'tproxy', 'NONE', 'TPROXY ', ' REDIRECT', 'TPROXY\n', '', 'REDIRECT,TPROXY'];

export const HOSTILE_ANNOTATIONS: readonly HostileAnnotation[] = [
  // `eth0\r` is the valid name `eth0` for an interface annotation: its items are trimmed, as upstream does.
  ...ALL_ANNOTATIONS.flatMap((annotation) =>
    COMMON_VALUES.filter((value) => !(value === 'eth0\r' && INTERFACE_ANNOTATIONS.includes(annotation))).map((value) => ({
      annotation,
      value,
    })),
  ),
  ...PORT_ANNOTATIONS.flatMap((annotation) => PORT_VALUES.map((value) => ({ annotation, value }))),
  ...PORT_NO_WILDCARD_ANNOTATIONS.map((annotation) => ({ annotation, value: '*' })),
  ...CIDR_ANNOTATIONS.flatMap((annotation) => CIDR_VALUES.map((value) => ({ annotation, value }))),
  { annotation: 'traffic.sidecar.istio.io/excludeOutboundIPRanges', value: '*' },
  ...INTERFACE_ANNOTATIONS.flatMap((annotation) => INTERFACE_VALUES.map((value) => ({ annotation, value }))),
  ...MODE_VALUES.map((value) => ({ annotation: MODE_ANNOTATION, value })),
];
