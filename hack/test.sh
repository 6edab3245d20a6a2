#!/usr/bin/env bash
# make test: the cluster binaries' build and then the end-to-end tests, with the unit tests
# (make test-unit) beside both at the lowest CPU priority (nice 19).
#
# Why: the unit tests need no cluster, but they cost about 540 CPU seconds (vet, test builds,
# links). Run beside the build at the same priority, they took half the build's two cores and
# delayed the end-to-end start by minutes; at nice 19 they take what the build's single-threaded
# links and the end-to-end tests' waiting leave idle. Their output goes to .test/unit.log and is
# summed up at the end; any failure of either fails make test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
make=${MAKE:-make}
mkdir -p .test
log=.test/unit.log
rm -f .test/e2e.log # the end-to-end tests' log (hack/e2e.sh) of an earlier run

start=$SECONDS
echo "test: unit tests (make test-unit) start beside the build and the end-to-end tests, at nice 19; log: $log"
(
	rc=0
	nice -n 19 "$make" --no-print-directory test-unit >"$log" 2>&1 || rc=$?
	if [[ $rc == 0 ]]; then
		echo "test: unit tests passed in $((SECONDS - start))s ($log)"
	else
		echo "test: unit tests FAILED (exit $rc) after $((SECONDS - start))s; see $log"
	fi
	exit "$rc"
) &
unit=$!
# Stopped (Ctrl-C, or a timeout's SIGTERM), the unit tests and their go processes stop too: they
# are in this script's process group.
trap 'trap - INT TERM; kill 0 2>/dev/null; exit 130' INT TERM

# fg runs a command in the background and waits for it, so that a signal reaches the trap at once
# (bash runs traps only after a foreground command ends).
fg() {
	"$@" &
	wait $!
}

e2e=0 built=""
if fg "$make" --no-print-directory cluster-bin; then
	built=$SECONDS
	echo "test: the cluster binaries are ready after $((built - start))s; the end-to-end tests start"
	# Its output is kept in .test/e2e.log too (hack/e2e.sh), for the summary at the end.
	fg "$make" --no-print-directory test-e2e || e2e=$?
else
	e2e=$?
fi
ended=$SECONDS

if kill -0 "$unit" 2>/dev/null; then
	echo "test: waiting for the unit tests ($log) ..."
fi
unit_rc=0
wait "$unit" || unit_rc=$?
trap - INT TERM

echo "test: unit test packages:"
grep -E '^(ok|FAIL|---|panic:)' "$log" | sed 's/^/  /' || true
if [[ $unit_rc != 0 ]]; then
	echo "test: the unit tests failed; their log ($log) ends:"
	tail -n 150 "$log"
fi
if [[ $e2e != 0 ]]; then
	echo "test: the build or the end-to-end tests failed (exit $e2e)"
	# What each failed test said last (its t.Log and t.Error lines, without the members' logs
	# that a failed test dumps), so that the end of the output, often all a CI page keeps, says
	# why.
	if [[ -f .test/e2e.log ]]; then
		# go test -v marks whose lines follow with "=== RUN", "=== CONT" and "=== NAME" (tests that run
		# side by side interleave); a line of a helper names its own file, not a _test.go one.
		awk '
			/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
			/^ +[^ ]+\.go:[0-9]+: member [^ ]+: (role label|kubectl)/ { next }
			/^ +[^ ]+\.go:[0-9]+: / && cur != "" { n[cur]++; said[cur, n[cur]] = substr($0, 1, 400); next }
			/^panic: / { panicked = 1 }
			panicked && np < 40 { panics[++np] = substr($0, 1, 400) }
			/^ *--- FAIL: / {
				name = $3; print "test: " name " failed; its last lines:"
				from = n[name] > 12 ? n[name] - 11 : 1
				for (i = from; i <= n[name]; i++) print "  " said[name, i]
			}
			END {
				if (np > 0) { print "test: a test panicked:"; for (i = 1; i <= np; i++) print "  " panics[i] }
			}' .test/e2e.log
	fi
fi
# The wall time of each end-to-end test package, slowest first: where make test's time goes.
if [[ -f .test/e2e.log ]] && grep -qE $'^(ok  |FAIL)\t[^ \t]+\t[0-9.]+s' .test/e2e.log; then
	echo "test: end-to-end test packages by wall time:"
	awk -F'\t' '/^(ok  |FAIL)\t[^ \t]+\t[0-9.]+s/ { t = $3; sub(/s.*$/, "", t); printf "%s\t%s\t%s\n", t, $2, ($1 ~ /^ok/ ? "ok" : "FAIL") }' .test/e2e.log |
		sort -t$'\t' -k1,1 -rn |
		awk -F'\t' '{ printf "  %7.0f s  %-4s %s\n", $1, $3, $2; total += $1 } END { printf "  %7.0f s  in all (%d packages)\n", total, NR }'
fi
if [[ -n $built ]]; then
	echo "test: the build took $((built - start))s, the end-to-end tests $((ended - built))s"
fi
echo "test: finished in $((SECONDS - start))s: unit tests $([[ $unit_rc == 0 ]] && echo passed || echo FAILED), build and end-to-end $([[ $e2e == 0 ]] && echo passed || echo FAILED)"
[[ $unit_rc == 0 && $e2e == 0 ]]
