# `make up` / `make down`: a local Kubernetes cluster running the node image (included by the main
# Makefile, after mk/image.mk which defines IMAGE, IMAGE_ARCHIVE and `image`). Needs root. The rig
# (mk/e2e.mk) provides etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, crictl,
# helm, containerd, runc and the reference CNI plugins. E2E_PRIMARY_CNI_VERSION (environment, default
# 1.0.0) is the cniVersion of each node's primary conflist, for `make up` and the cluster scenarios.
NODES ?= 1
# Extra chart values, space-separated `key=value` (e.g. CHART_SET=profile=ambient).
CHART_SET ?=

.PHONY: up down e2e-cluster

up: setup e2e-rig image
	$(NODE) test/e2e/cluster/up.ts --nodes=$(NODES) --image=$(IMAGE) --image-archive=$(IMAGE_ARCHIVE) $(foreach s,$(CHART_SET),--set=$(s))

down:
	$(NODE) test/e2e/cluster/down.ts

# The cluster scenarios on a two-node cluster of their own, built from the node image `make image`
# writes (the cluster must not be up already).
e2e-cluster: e2e-rig image
	IMAGE=$(IMAGE) IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) $(NODE) --test --test-reporter=spec --test-timeout=$(TEST_TIMEOUT_MS) --test-concurrency=1 test/e2e/cluster/*.test.ts
