# The node image. Included by the main Makefile, which defines NODE and `build`.
#
# `make image` builds dist/image.oci.tar offline, with no registry and no Docker daemon: a Debian
# root filesystem from Debian's mirror (mmdebstrap, run as root), cut down to what the daemon runs,
# plus dist/install-cni and dist/istio-cni, packed as an OCI image layout (scripts/image/).
# Import it with `ctr -n k8s.io images import dist/image.oci.tar` or `podman load -i ...`.
#
# `make image-docker` builds the same layout with a container builder from the Dockerfile.
IMAGE_HUB ?= localhost/istio-cni
IMAGE_TAG ?= $(shell $(NODE) -p 'require("./package.json").version')
IMAGE ?= $(IMAGE_HUB)/install-cni:$(IMAGE_TAG)
IMAGE_ARCHIVE := dist/image.oci.tar
CONTAINER_BUILDER ?= $(firstword $(foreach b,docker podman buildah,$(shell command -v $(b) 2>/dev/null)))

.PHONY: image image-docker image-name

image: build
	$(NODE) scripts/image/build.ts $(IMAGE)

# The reference `make image` records in the archive (for scripts that import it).
image-name:
	@echo $(IMAGE)

# The Dockerfile adds the root filesystem tar `make image` leaves in build/image/.
image-docker: image
	@test -n "$(CONTAINER_BUILDER)" || { echo "make image-docker: no container builder (docker, podman or buildah) found; set CONTAINER_BUILDER" >&2; exit 1; }
	$(CONTAINER_BUILDER) $(if $(findstring buildah,$(CONTAINER_BUILDER)),bud,build) -t $(IMAGE) -f Dockerfile .

# The e2e suite runs the image (its tests import dist/image.oci.tar into containerd).
e2e: image

# Upstream Istio's Go agent as an offline image laid out as upstream's own (scripts/image/buildUpstream.ts),
# from the binaries bench/upstream/build.sh builds into $(BENCH_CACHE) (≈12 min of CPU the first time),
# and upstream's own Helm chart (manifests/charts/istio-cni of the same module), copied unchanged.
BENCH_CACHE ?= $(CURDIR)/.bench-cache
UPSTREAM_ISTIO_VERSION := $(shell sed -n 's/^ISTIO_VERSION="$${ISTIO_VERSION:-\(.*\)}"$$/\1/p' bench/upstream/build.sh)
UPSTREAM_IMAGE ?= localhost/istio-cni-upstream/install-cni:$(UPSTREAM_ISTIO_VERSION)

.PHONY: upstream-image upstream-image-name upstream-chart

upstream-image:
	BENCH_CACHE=$(BENCH_CACHE) nice -n 19 bash bench/upstream/build.sh
	$(NODE) scripts/image/buildUpstream.ts $(UPSTREAM_IMAGE) $(BENCH_CACHE)/bin

upstream-image-name:
	@echo $(UPSTREAM_IMAGE)

# Prints the chart's directory: $(BENCH_CACHE)/upstream-chart/<version>/istio-cni.
upstream-chart:
	@BENCH_CACHE=$(BENCH_CACHE) bash bench/upstream/chart.sh
