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

.PHONY: e2e-rig e2e manifests

e2e-rig:
	E2E_CACHE=$(E2E_CACHE) bash test/e2e/rig/build.sh

# Needs root: it runs containerd, creates network namespaces and touches the host's nat table.
e2e: setup e2e-rig build upstream-image upstream-chart
	IMAGE=$(IMAGE) IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) $(NODE) --test --test-reporter=spec --test-timeout=$(TEST_TIMEOUT_MS) --test-concurrency=1 $(E2E_TESTS)
	$(run-cluster-tests)

# Rewrites manifests/istio-cni.yaml (the chart's default rendering) with the rig's helm, for the rig's Kubernetes version.
manifests: e2e-rig
	$(NODE) test/e2e/support/writeDefaultManifest.ts
