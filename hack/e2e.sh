#!/usr/bin/env bash
# make test-e2e: the end-to-end tests on two fresh local clusters side by side, cache-test and
# cache-test2, each running its tests one at a time (a "track"):
#   a (cache-test):  the operator tests (e2e/operator) but the four slowest;
#   b (cache-test2): those four, every other end-to-end package and the bench's test, then the
#                    lifecycle tests, which delete the cluster and make it again.
# Both tracks take about the same time (BENCHMARKS.md, "The test budget").
#
# Why two clusters and not tests side by side in one: the operator tests each start an operator
# that acts on every namespace of its cluster, stop nodes and the object store, and cut the
# network; two of them in one cluster would disturb each other. Why one test at a time in each:
# two at a time on each side (four on two cores) slowed the timing-bound tests past their
# deadlines in CI.
#
# Each track's output goes to .test/e2e-<track>.log and here, each line after "<track>| ".
# The exit status is the first failure's; each track runs all its steps even after a failure, and
# deletes its cluster at the end when all passed (a failed track's cluster stays up for a look).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
flags=${GO_TEST_FLAGS:--count=1}
go_=(env CGO_ENABLED=0 GOFLAGS="-trimpath $(go env GOFLAGS 2>/dev/null)" go)
# Track b's share of e2e/operator: its four slowest tests (about 950 s of about 2,400).
slow='TestFaultCampaign|TestBackupOneGiB|TestBackupScheduleAndRetention|TestDeletingAChildCostsNothing'
mkdir -p .test
rm -f .test/e2e-*.log

# track NAME CLUSTER: make the cluster afresh (its object store's folder too), then run the
# track's steps (track_a, track_b) with the environment the tests read.
track() {
	local name=$1 cluster=$2 dir store rc=0 start=$SECONDS
	dir=$root/.cluster-${cluster#cache-}
	store=$root/.test/objectstore${cluster#cache-test}
	local cenv eenv
	cenv=(CLUSTER_NAME="$cluster" CLUSTER_DIR="$dir" MAX_RESTART_PERIOD=5s OBJECTSTORE_DIR="$store")
	eenv=(CACHE_E2E=1 CACHE_E2E_CLUSTER_DIR="$dir" CACHE_E2E_CLUSTER_NAME="$cluster" OBJECTSTORE_DIR="$store")
	env "${cenv[@]}" localcluster/cluster.sh down >/dev/null
	rm -rf "$store"
	if env "${cenv[@]}" localcluster/cluster.sh up; then
		echo "e2e: track $name: cluster $cluster is up after $((SECONDS - start))s"
		"track_$name" || rc=$?
	else
		rc=$?
	fi
	if ((rc == 0)); then
		env "${cenv[@]}" localcluster/cluster.sh down >/dev/null || rc=$?
	else
		echo "e2e: track $name failed; its cluster stays up for a look (KUBECONFIG=$dir/kubeconfig, the operators' logs in $dir/operator-*.log) until the next make test-e2e"
	fi
	echo "e2e: track $name finished in $((SECONDS - start))s (exit $rc)"
	return "$rc"
}

# step COMMAND...: one go test of a track, with its environment; a failure is remembered, the
# track goes on.
step() {
	env "${eenv[@]}" "$@" || failed=$?
}

track_a() {
	local failed=0
	step "${go_[@]}" test $flags -p 1 -timeout 60m -v -skip "^($slow)\$" ./e2e/operator/
	return "$failed"
}

track_b() {
	local failed=0 others helm
	# helm, which only e2e/chart uses, builds beside the first step at the lowest CPU priority (on
	# a new machine, minutes that would otherwise come before any test; else "up to date" at once).
	nice -n 19 "${MAKE:-make}" --no-print-directory helm >.test/helm.log 2>&1 &
	helm=$!
	step "${go_[@]}" test $flags -p 1 -timeout 60m -v -run "^($slow)\$" ./e2e/operator/
	if ! wait "$helm"; then
		echo "e2e: make helm failed; .test/helm.log ends:"
		tail -n 20 .test/helm.log
		failed=1
	fi
	cat .test/helm.log
	others=$("${go_[@]}" list ./e2e/... ./bench/ | grep -vx 'example.com/cache-operator/e2e/operator')
	# shellcheck disable=SC2086 # one package per word
	step "${go_[@]}" test $flags -p 1 -timeout 60m -v $others
	step env CACHE_E2E_LIFECYCLE=1 "${go_[@]}" test $flags -v -run TestRestoreIntoAFreshCluster ./e2e/lifecycle/
	step env CACHE_E2E_LIFECYCLE=1 "${go_[@]}" test $flags -v -run TestClusterLifecycle ./e2e/lifecycle/
	return "$failed"
}

# run NAME CLUSTER: a track in the background, its output to its log and, prefixed, here.
run() {
	(
		set -o pipefail
		track "$1" "$2" 2>&1 | tee ".test/e2e-$1.log" | sed -u "s/^/$1| /"
	) &
}

start=$SECONDS
echo "e2e: two tracks side by side: a on cluster cache-test, b on cache-test2 (logs .test/e2e-a.log, .test/e2e-b.log)"
run a cache-test
pid_a=$!
run b cache-test2
pid_b=$!
rc_a=0 rc_b=0
wait "$pid_a" || rc_a=$?
wait "$pid_b" || rc_b=$?
echo "e2e: both tracks done in $((SECONDS - start))s: a exit $rc_a, b exit $rc_b"
((rc_a == 0)) || exit "$rc_a"
exit "$rc_b"
