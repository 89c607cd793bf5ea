# `make up` / `make down`: a local Kubernetes cluster running the node image (included by the main
# Makefile, after mk/image.mk which defines IMAGE). Needs root. The rig (mk/e2e.mk) provides etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, crictl and helm.
NODES ?= 1
IMAGE_TAR ?= dist/image.oci.tar
# Extra chart values, space-separated `key=value` (e.g. CHART_SET=profile=ambient).
CHART_SET ?=

.PHONY: up down e2e-cluster

up: e2e-rig
	$(NODE) test/e2e/cluster/up.ts --nodes=$(NODES) --image=$(IMAGE) --image-tar=$(IMAGE_TAR) $(foreach s,$(CHART_SET),--set=$(s))

down:
	$(NODE) test/e2e/cluster/down.ts

# The install and sidecar scenarios on a two-node cluster of its own (needs the node image archive;
# the cluster must not be up already).
e2e-cluster: e2e-rig build
	IMAGE=$(IMAGE) IMAGE_TAR=$(IMAGE_TAR) $(NODE) --test --test-reporter=spec --test-timeout=$(TEST_TIMEOUT_MS) --test-concurrency=1 test/e2e/cluster/*.test.ts
