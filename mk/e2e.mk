# The e2e rig and scenarios. Included by the main Makefile, which defines NODE and `build`.
# The rig (etcd, kube-apiserver, crictl, cnitool, helm, containerd 2.x + runc, the reference CNI
# plugins, a local pause image) is built from package registries into the git-ignored .e2e-cache/;
# only the first run pays.
# The cluster scenarios (test/e2e/cluster/, `make e2e-cluster`'s run-cluster-tests in mk/cluster.mk)
# run last, on kubelet clusters of their own built from the node image (mk/image.mk makes `e2e`
# depend on `image`).
E2E_TESTS := test/e2e/*.test.ts
# Where the rig (test/e2e/rig/build.sh) and upstream's agent for the switch scenario are cached.
E2E_CACHE ?= $(CURDIR)/.e2e-cache
# The rig depends on its pinned versions only, so a machine keeps one for all its checkouts: as root,
# a checkout without .e2e-cache links it to this directory (a fresh clone, CI's among them, reuses
# what an earlier clone built; each component is rebuilt when its version changes). Empty: a private
# .e2e-cache per checkout. The build scripts lock it, so two checkouts never build into it at once.
E2E_SHARED_CACHE ?= /var/cache/istio-cni/e2e

.PHONY: e2e-rig e2e manifests

e2e-rig:
	@if [ "$(E2E_CACHE)" = "$(CURDIR)/.e2e-cache" ] && [ ! -e .e2e-cache ] && [ ! -L .e2e-cache ] && [ -n "$(E2E_SHARED_CACHE)" ] \
	  && [ "$$(id -u)" = 0 ] && mkdir -p "$(E2E_SHARED_CACHE)"; then \
	  ln -s "$(E2E_SHARED_CACHE)" .e2e-cache && echo "e2e rig cache: .e2e-cache -> $(E2E_SHARED_CACHE) (shared by this machine's checkouts)"; fi
	E2E_CACHE=$(E2E_CACHE) $(PHASE) e2e-rig bash test/e2e/rig/build.sh

# Needs root: it runs containerd, creates network namespaces and touches the host's nat table.
e2e: setup e2e-rig build upstream-image upstream-chart
	IMAGE=$(IMAGE) IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) $(PHASE) 'e2e tests' $(call node_test,$(E2E_TEST_TIMEOUT_MS)) --test-concurrency=1 $(E2E_TESTS)
	$(run-cluster-tests)

# Rewrites manifests/istio-cni.yaml (the chart's default rendering) with the rig's helm, for the rig's Kubernetes version.
manifests: e2e-rig
	$(NODE) test/e2e/support/writeDefaultManifest.ts
