/** Annotation and label names read from pods (values from `istio.io/api`). */
export const ANNOTATION = {
  includeOutboundIPRanges: 'traffic.sidecar.istio.io/includeOutboundIPRanges',
  excludeOutboundIPRanges: 'traffic.sidecar.istio.io/excludeOutboundIPRanges',
  includeInboundPorts: 'traffic.sidecar.istio.io/includeInboundPorts',
  excludeInboundPorts: 'traffic.sidecar.istio.io/excludeInboundPorts',
  includeOutboundPorts: 'traffic.sidecar.istio.io/includeOutboundPorts',
  excludeOutboundPorts: 'traffic.sidecar.istio.io/excludeOutboundPorts',
  excludeInterfaces: 'traffic.sidecar.istio.io/excludeInterfaces',
  kubevirtInterfaces: 'traffic.sidecar.istio.io/kubevirtInterfaces',
  rerouteVirtualInterfaces: 'istio.io/reroute-virtual-interfaces',
  interceptionMode: 'sidecar.istio.io/interceptionMode',
  inject: 'sidecar.istio.io/inject',
  status: 'sidecar.istio.io/status',
} as const;

export const LABEL = {
  inject: 'sidecar.istio.io/inject',
} as const;
