# The istio-cni node image: the install-cni daemon and the istio-cni plugin (self-contained Node.js
# executables built by `make build`) plus the tools they run on the node. Build with `make image`.
#
# Layout matches the chart (manifests/charts/istio-cni) and the daemon's defaults:
#   /usr/local/bin/install-cni  the entrypoint (DaemonSet command `install-cni`)
#   /opt/cni/bin/istio-cni      the plugin the daemon copies to the host (CNI_BIN_SOURCE_DIR)
FROM debian:bookworm-slim

# iptables (both the nft and legacy backends), nftables, ipset and iproute2 program pod and host
# rules; util-linux provides nsenter.
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables nftables ipset iproute2 util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*

COPY dist/install-cni /usr/local/bin/install-cni
COPY dist/istio-cni /opt/cni/bin/istio-cni

ENTRYPOINT ["/usr/local/bin/install-cni"]
