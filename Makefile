# cache-operator. The two commands a newcomer needs: `make up` and `make test` (see README.md).
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT := $(abspath .)
CLUSTER_BIN := $(ROOT)/bin/cluster
KUBECTL := $(CLUSTER_BIN)/kubectl
# The development cluster (make cluster / make up) and the one make test creates and deletes.
DEV_CLUSTER := CLUSTER_NAME=cache-dev CLUSTER_DIR=$(ROOT)/.cluster
# The test cluster's nodes cap CrashLoopBackOff at 5 s (the kubelet's maxContainerRestartPeriod):
# the failover tests kill the same members ten times each. 5 s, not less: the operator has failed
# over (p50 1.5 s) before the killed primary's container comes back, the case those tests measure.
# Its object store keeps its folder outside the cluster's (OBJECTSTORE_DIR), so that a test can
# restore a backup into a new cluster from the bucket alone.
TEST_OBJECTSTORE := $(ROOT)/.test/objectstore
TEST_CLUSTER := CLUSTER_NAME=cache-test CLUSTER_DIR=$(ROOT)/.cluster-test MAX_RESTART_PERIOD=5s OBJECTSTORE_DIR=$(TEST_OBJECTSTORE)
GO_TEST_FLAGS ?= -count=1
# Every go command here builds as make cluster-bin does (no cgo, -trimpath). The build cache is keyed
# on those flags, so the packages the operator shares with the cluster binaries (client-go,
# apimachinery, k8s.io/api, gRPC, ...: the operator's go.mod pins the versions localcluster/go.work selects)
# compile once, not once per command.
GO := CGO_ENABLED=0 GOFLAGS="-trimpath $(shell go env GOFLAGS 2>/dev/null)" go

.PHONY: help prereqs prereqs-test
help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

prereqs: ## check (and, as root with apt-get, install) what the local cluster needs; make up runs it first
	@hack/prereqs.sh

prereqs-test: ## prereqs and what only the tests need (promtool); make test runs it first
	@hack/prereqs.sh --test

##@ Local cluster
.PHONY: cluster-bin cluster cluster-down helm
cluster-bin: ## build the node agent (and, beside the rest, the nodes' images), etcd, kube-*, kubectl, kwok(ctl), CoreDNS, the provisioner and the object store into bin/cluster (minutes, once)
	@localcluster/build.sh

helm: ## build bin/cluster/helm (the chart's tests; make test builds it)
	@localcluster/build.sh tools

cluster: cluster-bin ## create or restart the local cluster cache-dev; kubeconfig in .cluster/kubeconfig
	@$(DEV_CLUSTER) localcluster/cluster.sh up

cluster-down: ## stop every process of the local cluster and delete its files
	@$(DEV_CLUSTER) localcluster/cluster.sh down

##@ Operator
OPERATOR := $(ROOT)/bin/cache-operator
DEV_KUBECONFIG := $(ROOT)/.cluster/kubeconfig
RUN_ARGS ?=
.PHONY: build install run up down
build: ## build bin/cache-operator and the kubectl plugin (bin/kubectl-managedcache, bin/kubectl-mc: links to it)
	@mkdir -p bin
	@echo "build: compiling bin/cache-operator (about 4 minutes on an empty Go build cache, seconds after) ..."
	@$(GO) build -o $(OPERATOR).new .
	@if cmp -s $(OPERATOR).new $(OPERATOR); then rm $(OPERATOR).new; else mv $(OPERATOR).new $(OPERATOR); fi
	@# The kubectl plugin is the same binary under the names kubectl looks for (README: bin/ on the PATH).
	@ln -sfn cache-operator bin/kubectl-managedcache && ln -sfn cache-operator bin/kubectl-mc

install: ## apply the CRD and the operator's namespace to the current kubeconfig ($$KUBECONFIG)
	$(KUBECTL) apply --server-side --force-conflicts -k crd/
	$(KUBECTL) wait --for=condition=Established crd/managedcaches.cache.example.com --timeout=60s
	$(KUBECTL) get namespace cache-operator-system >/dev/null 2>&1 || $(KUBECTL) create namespace cache-operator-system

run: build install ## run the operator in the foreground against the current kubeconfig
	$(OPERATOR) --kubeconfig "$${KUBECONFIG:-$$HOME/.kube/config}" $(RUN_ARGS)

up: prereqs build cluster ## the main job: local cluster, CRD, operator, sample cache; waits until Ready
	@DEV_KUBECONFIG=$(DEV_KUBECONFIG) OPERATOR=$(OPERATOR) KUBECTL=$(KUBECTL) hack/up.sh

deploy: build ## deploy the operator into the cluster of $$KUBECONFIG (default: the local one) with manifests/
	@KUBECTL="$(KUBECTL) --kubeconfig $${KUBECONFIG:-$(DEV_KUBECONFIG)}" hack/deploy.sh

down: ## stop the operator started by make up, then the local cluster
	@bash -c 'pid_trust=("$(OPERATOR)"); . hack/pids.sh; f=.cluster/operator.pid; \
		if pid_alive $$f; then echo "down: stopping the operator (PID $$(pid_of $$f))"; pid_kill $$f; fi'
	@$(MAKE) --no-print-directory cluster-down

##@ Tests
.PHONY: test test-unit test-e2e
test: prereqs-test ## every test: the cluster binaries, then end-to-end tests on a fresh cluster cache-test; unit tests beside both at nice 19
	@MAKE="$(MAKE)" hack/test.sh

test-unit: ## unit and golden-file tests (no cluster), the operator's and the node agent's
	$(GO) vet ./...
	$(GO) test $(GO_TEST_FLAGS) ./...
	cd localcluster/node && $(GO) vet ./... && $(GO) test $(GO_TEST_FLAGS) ./...

test-e2e: cluster-bin ## end-to-end tests on a fresh cluster cache-test (deleted afterwards); see hack/e2e.sh
	@GO_TEST_FLAGS="$(GO_TEST_FLAGS)" MAKE="$(MAKE)" hack/e2e.sh

FAULTS ?= 60
SEED ?=
SHARDED_FAULTS ?= 24
.PHONY: chaos
chaos: prereqs cluster-bin ## the fault campaigns: FAULTS randomized faults (default 60) on a cache, then SHARDED_FAULTS (default 24; 0: none) on a sharded one, on a fresh cluster cache-test (SEED=n replays an order); tables in .test/chaos*.md
	@$(TEST_CLUSTER) localcluster/cluster.sh down >/dev/null
	@$(TEST_CLUSTER) localcluster/cluster.sh up
	@mkdir -p .test
	$(E2E_ENV) CACHE_E2E_CHAOS_FAULTS=$(FAULTS) CACHE_E2E_CHAOS_SEED=$(SEED) CACHE_E2E_CHAOS_TABLE=$(ROOT)/.test/chaos.md \
		CACHE_E2E_CHAOS_SHARDED_FAULTS=$(SHARDED_FAULTS) CACHE_E2E_CHAOS_SHARDED_TABLE=$(ROOT)/.test/chaos-sharded.md \
		$(GO) test $(GO_TEST_FLAGS) -timeout 6h -v -run '^(TestFaultCampaign|TestShardedFaultCampaign)$$' ./e2e/operator/
	@$(TEST_CLUSTER) localcluster/cluster.sh down >/dev/null
	@cat .test/chaos.md; if [ -f .test/chaos-sharded.md ]; then cat .test/chaos-sharded.md; fi

E2E_ENV := CACHE_E2E=1 CACHE_E2E_CLUSTER_DIR=$(ROOT)/.cluster-test CACHE_E2E_CLUSTER_NAME=cache-test OBJECTSTORE_DIR=$(TEST_OBJECTSTORE)

##@ Benchmarks
N ?= 100
RUNS ?= 1
FOREIGN ?= 0
.PHONY: bench
bench: build cluster-bin ## N caches on a fresh KWOK cluster against the oracle (N=100,300,1000 RUNS=3 FOREIGN=10000 ...); see BENCHMARKS.md
	$(GO) run ./bench -n "$(N)" -runs $(RUNS) -foreign $(FOREIGN)

MIB ?= 1024
.PHONY: bench-reshard
bench-reshard: prereqs build cluster-bin ## a sharded cache holding MIB MiB (default 1024) resharded 3 → 6 → 3 shards under a writer on a fresh cluster cache-test: each move's time, MiB/s, p99, writes lost
	@$(TEST_CLUSTER) localcluster/cluster.sh down >/dev/null
	@$(TEST_CLUSTER) localcluster/cluster.sh up
	$(E2E_ENV) CACHE_E2E_RESHARD_MIB=$(MIB) $(GO) test $(GO_TEST_FLAGS) -count=1 -timeout 3h -v -run '^TestReshardLarge$$' ./e2e/operator/
	@$(TEST_CLUSTER) localcluster/cluster.sh down >/dev/null
