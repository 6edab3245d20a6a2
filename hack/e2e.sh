#!/usr/bin/env bash
# make test-e2e: the end-to-end tests on a fresh local cluster cache-test, one test at a time: the
# operator tests (e2e/operator) first, then every other end-to-end package and the bench's test,
# then the lifecycle tests, which delete the cluster and make it again.
#
# helm, which only e2e/chart uses, is built beside the operator tests at the lowest CPU priority:
# on a new machine its minutes no longer come before the first test; else it is up to date at once.
#
# Why one test at a time: this machine's two cores are the limit. Run in two clusters side by side,
# each test took 1.5 to 5 times as long (BENCHMARKS.md, "The test budget"), the sum no shorter,
# and timing-bound tests passed their deadlines.
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
	local helm others start=$SECONDS
	env "${cluster[@]}" localcluster/cluster.sh down >/dev/null
	rm -rf "$root/.test/objectstore"
	env "${cluster[@]}" localcluster/cluster.sh up || return
	echo "e2e: cluster cache-test is up after $((SECONDS - start))s"

	nice -n 19 "${MAKE:-make}" --no-print-directory helm >.test/helm.log 2>&1 &
	helm=$!
	step "${go_[@]}" test $flags -p 1 -timeout 60m -v ./e2e/operator/
	if ! wait "$helm"; then
		echo "e2e: make helm failed; .test/helm.log ends:"
		tail -n 20 .test/helm.log
		((failed)) || failed=1
	fi
	cat .test/helm.log
	others=$("${go_[@]}" list ./e2e/... ./bench/ | grep -vx 'example.com/cache-operator/e2e/operator')
	# shellcheck disable=SC2086 # one package per word
	step "${go_[@]}" test $flags -p 1 -timeout 60m -v $others
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
