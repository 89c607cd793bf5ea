# The istio-cni node image for people with a container builder: `make image-docker`.
#
# It adds the root filesystem `make image` assembles in build/image/rootfs-<arch>.tar (amd64 or arm64:
# TARGETARCH, which BuildKit sets per platform), so both routes give the same layout (`make image`
# alone writes dist/image.oci.tar, both platforms, with no registry and no daemon):
#   /usr/local/bin/install-cni  the entrypoint (DaemonSet command `install-cni`)
#   /opt/cni/bin/istio-cni      the plugin the daemon copies to the host (CNI_BIN_SOURCE_DIR)
#   iptables (nft and legacy), nft, ipset, ip, nsenter, unshare, cat, their libraries, the iptables
#   extensions, the CA bundle and the packages' copyright files, from Debian bookworm; no shell.
FROM scratch
ARG TARGETARCH=amd64
ADD build/image/rootfs-${TARGETARCH}.tar /
ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["/usr/local/bin/install-cni"]
