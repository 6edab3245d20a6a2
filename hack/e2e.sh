#!/usr/bin/env bash
# make test-e2e: the end-to-end tests on a fresh local cluster cache-test, package by package in
# go test's order (e2e/chart and e2e itself expect a cluster that the operator tests have not used
# yet: run after them, they failed), then the lifecycle tests, which delete the cluster and make it
# again. helm, which only e2e/chart uses, is built first.
#
# Within a package, the tests that change what every test sees (a node stopped, the control plane
# or the object store restarted, leader election, RBAC, the webhooks, figures of the whole machine)
# and those that assert tight timings run one at a time; then the others, which mostly wait on the
# product's own clocks, run side by side, each with an operator confined to its own namespace;
# e2e/operator/parallel_test.go admits four at a time, longest first (go test's -parallel 64 lets
# every one of them reach it). Two clusters side by side were tried and were worse (BENCHMARKS.md,
# "The test budget"): every test took 1.5 to 5 times as long.
#
# The output goes here and to .test/e2e.log (make test's summary reads it). After a failure the
# other packages still run, but not the lifecycle tests: the cluster stays up for a look. The exit
# status is the first failure's. A passed run ends with the cluster deleted (by the lifecycle test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
flags=${GO_TEST_FLAGS:--count=1}
go_=(env CGO_ENABLED=0 GOFLAGS="-trimpath $(go env GOFLAGS 2>/dev/null)" go)
cluster=(CLUSTER_NAME=cache-test CLUSTER_DIR="$root/.cluster-test" MAX_RESTART_PERIOD=5s OBJECTSTORE_DIR="$root/.test/objectstore")
e2e=(CACHE_E2E=1 CACHE_E2E_CLUSTER_DIR="$root/.cluster-test" CACHE_E2E_CLUSTER_NAME=cache-test OBJECTSTORE_DIR="$root/.test/objectstore")
mkdir -p .test

failed=0
# step COMMAND...: one go test, with the tests' environment; a failure is remembered, the run goes on.
step() {
	local rc=0
	env "${e2e[@]}" "$@" || rc=$?
	if ((rc != 0 && failed == 0)); then failed=$rc; fi
}

run() {
	local start=$SECONDS
	env "${cluster[@]}" localcluster/cluster.sh down >/dev/null
	rm -rf "$root/.test/objectstore"
	env "${cluster[@]}" localcluster/cluster.sh up || return
	echo "e2e: cluster cache-test is up after $((SECONDS - start))s"

	"${MAKE:-make}" --no-print-directory helm || return
	step "${go_[@]}" test $flags -p 1 -parallel 64 -timeout 60m -v ./e2e/... ./bench/
	if ((failed == 0)); then
		step env CACHE_E2E_LIFECYCLE=1 "${go_[@]}" test $flags -v -run TestRestoreIntoAFreshCluster ./e2e/lifecycle/
		step env CACHE_E2E_LIFECYCLE=1 "${go_[@]}" test $flags -v -run TestClusterLifecycle ./e2e/lifecycle/
	else
		echo "e2e: the lifecycle tests (which delete the cluster) are left out after a failure: the cluster stays up for a look (KUBECONFIG=.cluster-test/kubeconfig, the operators' logs in .cluster-test/operator-*.log)"
	fi
	echo "e2e: finished in $((SECONDS - start))s (exit $failed)"
	return "$failed"
}

set -o pipefail
run 2>&1 | tee .test/e2e.log
