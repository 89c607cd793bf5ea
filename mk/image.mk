# The node image (Dockerfile). Needs a container builder (docker, podman or buildah); not part of
# `make test` or `make e2e`. Included by the main Makefile.
IMAGE_HUB ?= localhost/istio-cni
IMAGE_TAG ?= $(shell $(NODE) -p 'require("./package.json").version')
IMAGE ?= $(IMAGE_HUB)/install-cni:$(IMAGE_TAG)
CONTAINER_BUILDER ?= $(firstword $(foreach b,docker podman buildah,$(shell command -v $(b) 2>/dev/null)))

.PHONY: image

image: build
	@test -n "$(CONTAINER_BUILDER)" || { echo "make image: no container builder (docker, podman or buildah) found; set CONTAINER_BUILDER" >&2; exit 1; }
	$(CONTAINER_BUILDER) $(if $(findstring buildah,$(CONTAINER_BUILDER)),bud,build) -t $(IMAGE) -f Dockerfile .
