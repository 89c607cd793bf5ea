# The node image. Included by the main Makefile, which defines NODE and `build`.
#
# `make image` builds dist/image.oci.tar offline, with no registry and no Docker daemon: per
# platform (linux/amd64, linux/arm64) a Debian root filesystem of that architecture from Debian's
# mirror (mmdebstrap, run as root; arm64's package scripts under qemu-user), cut down to what the
# daemon runs, plus that platform's install-cni and istio-cni from dist/ or dist/linux-arm64/, packed
# as one OCI image layout whose index offers both (scripts/image/). Import it with
# `ctr -n k8s.io images import dist/image.oci.tar` (the machine's own platform) or `podman load -i ...`.
#
# `make image-docker` builds this machine's platform with a container builder from the Dockerfile.
IMAGE_HUB ?= localhost/istio-cni
IMAGE_TAG ?= $(shell $(NODE) -p 'require("./package.json").version')
IMAGE ?= $(IMAGE_HUB)/install-cni:$(IMAGE_TAG)
IMAGE_ARCHIVE := dist/image.oci.tar
CONTAINER_BUILDER ?= $(firstword $(foreach b,docker podman buildah,$(shell command -v $(b) 2>/dev/null)))

.PHONY: image image-docker image-name

image: build
	$(PHASE) image $(NODE) scripts/image/build.ts $(IMAGE)

# The reference `make image` records in the archive (for scripts that import it).
image-name:
	@echo $(IMAGE)

# The Dockerfile adds the root filesystem tar `make image` leaves in build/image/ for TARGETARCH.
IMAGE_DOCKER_ARCH ?= $(if $(filter aarch64 arm64,$(shell uname -m)),arm64,amd64)
image-docker: image
	@test -n "$(CONTAINER_BUILDER)" || { echo "make image-docker: no container builder (docker, podman or buildah) found; set CONTAINER_BUILDER" >&2; exit 1; }
	$(CONTAINER_BUILDER) $(if $(findstring buildah,$(CONTAINER_BUILDER)),bud,build) --build-arg TARGETARCH=$(IMAGE_DOCKER_ARCH) -t $(IMAGE) -f Dockerfile .

# The e2e suite runs the image (its tests import dist/image.oci.tar into containerd).
e2e: image

# Upstream Istio's Go agent as an offline image laid out as upstream's own (scripts/image/buildUpstream.ts),
# from the binaries bench/upstream/build.sh builds (≈17 min of CPU the first time; its stamp skips it
# after), and upstream's own Helm chart (manifests/charts/istio-cni of the same module), copied
# unchanged. The cluster suite's switch.test.ts runs both, so they live in the e2e cache
# (UPSTREAM_CACHE, default $(E2E_CACHE)/upstream): a reused E2E_CACHE covers them. The archive is
# packed from our image's Debian tree, so after `make image`, and again only when the binaries'
# stamp or the packing scripts are newer than it.
UPSTREAM_CACHE ?= $(E2E_CACHE)/upstream
UPSTREAM_ISTIO_VERSION := $(shell sed -n 's/^ISTIO_VERSION="$${ISTIO_VERSION:-\(.*\)}"$$/\1/p' bench/upstream/build.sh)
UPSTREAM_IMAGE ?= localhost/istio-cni-upstream/install-cni:$(UPSTREAM_ISTIO_VERSION)
UPSTREAM_IMAGE_ARCHIVE := dist/image-upstream.oci.tar
UPSTREAM_CHART_DIR = $(UPSTREAM_CACHE)/upstream-chart/$(UPSTREAM_ISTIO_VERSION)/istio-cni

.PHONY: upstream-image upstream-image-name upstream-chart

upstream-image: image
	BENCH_CACHE=$(UPSTREAM_CACHE) $(PHASE) 'upstream build' nice -n 19 bash bench/upstream/build.sh
	@$(MAKE) --no-print-directory $(UPSTREAM_IMAGE_ARCHIVE)

$(UPSTREAM_IMAGE_ARCHIVE): $(UPSTREAM_CACHE)/bin/.upstream-istio-cni.stamp $(wildcard scripts/image/*.ts)
	$(PHASE) 'upstream image' $(NODE) scripts/image/buildUpstream.ts $(UPSTREAM_IMAGE) $(UPSTREAM_CACHE)/bin

upstream-image-name:
	@echo $(UPSTREAM_IMAGE)

# Prints the chart's directory: $(UPSTREAM_CACHE)/upstream-chart/<version>/istio-cni.
upstream-chart:
	@BENCH_CACHE=$(UPSTREAM_CACHE) bash bench/upstream/chart.sh
