# `make up` / `make down`: a local Kubernetes cluster running the node image (included by the main
# Makefile, after mk/image.mk which defines IMAGE, IMAGE_ARCHIVE and `image`). Needs root. The rig
# (mk/e2e.mk) provides etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, crictl,
# helm, containerd, runc and the reference CNI plugins. E2E_PRIMARY_CNI_VERSION (environment, default
# 1.0.0) is the cniVersion of each node's primary conflist, for `make up` and the cluster scenarios.
NODES ?= 1
# The cluster's address families: ipv4, ipv6 (IPv6 only) or dual (dual-stack, IPv4 first).
IP_FAMILY ?= ipv4
# Extra chart values, space-separated `key=value` (e.g. CHART_SET=profile=ambient).
CHART_SET ?=

.PHONY: up down e2e-cluster

up: setup e2e-rig image
	$(NODE) test/e2e/cluster/up.ts --nodes=$(NODES) --image=$(IMAGE) --image-archive=$(IMAGE_ARCHIVE) --ip-family=$(IP_FAMILY) $(foreach s,$(CHART_SET),--set=$(s))

down:
	$(NODE) test/e2e/cluster/down.ts

# The cluster scenarios, each file on a two-node cluster of its own built from the node image `make
# image` writes (the cluster must not be up already): scenarios.test.ts once per primary conflist
# cniVersion in CLUSTER_PRIMARY_CNI_VERSIONS (E2E_PRIMARY_CNI_VERSION alone when set; else 1.0.0,
# which containerd runs no STATUS for, and 1.1.0, which it does), then every other file once
# (status.test.ts picks 1.1.0 itself). `make e2e` runs this last.
CLUSTER_PRIMARY_CNI_VERSIONS ?= $(or $(E2E_PRIMARY_CNI_VERSION),1.0.0 1.1.0)
CLUSTER_SCENARIOS := test/e2e/cluster/scenarios.test.ts
CLUSTER_OTHER_TESTS = $(filter-out $(CLUSTER_SCENARIOS),$(wildcard test/e2e/cluster/*.test.ts))
CLUSTER_TEST = IMAGE=$(IMAGE) IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) UPSTREAM_IMAGE=$(UPSTREAM_IMAGE) UPSTREAM_IMAGE_ARCHIVE=$(UPSTREAM_IMAGE_ARCHIVE) UPSTREAM_CHART_DIR=$(UPSTREAM_CHART_DIR) $(call node_test,$(E2E_TEST_TIMEOUT_MS)) --test-concurrency=1
define run-cluster-tests
	set -e; for v in $(CLUSTER_PRIMARY_CNI_VERSIONS); do \
	  echo "== $(CLUSTER_SCENARIOS), primary conflist cniVersion $$v"; \
	  E2E_PRIMARY_CNI_VERSION=$$v $(PHASE) "cluster scenarios (cniVersion $$v)" $(CLUSTER_TEST) $(CLUSTER_SCENARIOS); \
	done
	$(if $(CLUSTER_OTHER_TESTS),$(PHASE) 'cluster suites' $(CLUSTER_TEST) $(CLUSTER_OTHER_TESTS))
endef

e2e-cluster: e2e-rig image upstream-image upstream-chart
	$(run-cluster-tests)
