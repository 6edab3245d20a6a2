// Command bench measures the operator at scale on the local cluster's KWOK nodes, against an
// oracle: the same children rendered by the engine and applied directly, in the same run. See
// BENCHMARKS.md. `make bench` runs it (N=100 by default; N=100,300,1000 for the scaling runs,
// FOREIGN=10000 for foreign load).
//
// Each run measures the oracle on a fresh cluster (localcluster/cluster.sh with KWOK nodes only and
// the client limits of kube-controller-manager, kube-scheduler and the API server lifted), then,
// on another fresh one, runs the operator as its ServiceAccount with default flags and measures:
//  1. N caches (sizes 1-3) created at once: seconds until every one is Ready;
//  2. the operator's requests by verb and resource, from the API server's audit log;
//  3. an idle window after convergence: requests while nothing changes;
//  4. a rolling change of every cache (a CPU request: every member restarts): seconds, writes;
//  5. the operator's peak RSS (VmHWM), peak Go heap and CPU seconds;
//
// The oracle: the same children applied directly, no operator, until every StatefulSet is ready.
//
// It prints one table, merges the medians into bench/results/latest.json, draws
// bench/results/ready-n<N>.png, and rewrites the results section of BENCHMARKS.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"example.com/cache-operator/e2e/framework"
)

func main() {
	root := framework.RepoRoot()
	ns := flag.String("n", "100", "comma-separated numbers of caches, one configuration each")
	foreign := flag.Int("foreign", 0, "objects that are not the operator's (Secrets, Services, StatefulSets) created before it starts")
	runs := flag.Int("runs", 1, "runs of each configuration; the results are their medians")
	idle := flag.Duration("idle", 30*time.Second, "the idle window after convergence")
	results := flag.String("results", filepath.Join(root, "bench", "results"), "folder of latest.json and the plots")
	benchmarks := flag.String("benchmarks", filepath.Join(root, "BENCHMARKS.md"), "the document whose results section is rewritten (empty: none)")
	clusterDir := flag.String("cluster-dir", filepath.Join(root, ".cluster-bench"), "the bench cluster's state folder")
	clusterName := flag.String("cluster-name", "cache-bench", "the bench cluster's name")
	reuse := flag.Bool("reuse", false, "measure on the cluster already running at -cluster-dir, and leave it running")
	logDir := flag.String("logs", filepath.Join(root, ".bench-logs"), "folder of the operator's logs, kept after the cluster is gone")
	profile := flag.Bool("profile", false, "run the operator with --profiling and save its heap profile after convergence into -logs")
	keep := flag.Bool("keep", false, "leave the last bench cluster running")
	operatorBin := flag.String("operator", filepath.Join(root, "bin", "cache-operator"), "the operator binary")
	operatorArgs := flag.String("operator-args", "", "flags added to the operator's defaults (space-separated)")
	rollTimeout := flag.Duration("roll-timeout", 0, "the bound of the rolling change (0: as for convergence, 10 min + 0.6 s per cache)")
	flag.Parse()

	var sizes []int
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fail(fmt.Errorf("-n: %q is not a positive number", f))
		}
		sizes = append(sizes, n)
	}
	// Interrupted, the bench leaves nothing running: the operator dies with it (Pdeathsig), and
	// the bench cluster is deleted unless it was there before (-reuse) or is to be kept.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		logf("%v: stopping", sig)
		if !*reuse && !*keep {
			_ = clusterScript(runConfig{root: root, clusterDir: *clusterDir, clusterName: *clusterName}, "down")
		}
		os.Exit(1)
	}()
	commit, _ := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	ctx := context.Background()
	var fresh []summary
	for _, n := range sizes {
		var measured []runResult
		for r := 1; r <= *runs; r++ {
			cfg := runConfig{root: root, clusterDir: *clusterDir, clusterName: *clusterName, reuse: *reuse, n: n,
				foreign: *foreign, run: r, idle: *idle, rollTimeout: *rollTimeout, logDir: *logDir, profile: *profile, operatorBin: *operatorBin, operatorArgs: strings.Fields(*operatorArgs)}
			res, err := measure(ctx, cfg)
			if err != nil {
				if !*reuse && !*keep { // -keep leaves it for a look
					_ = clusterScript(cfg, "down")
				}
				fail(fmt.Errorf("N=%d run %d: %w (operator logs in %s)", n, r, err, *logDir))
			}
			measured = append(measured, *res)
		}
		s := summarize(measured)
		s.Date = time.Now().UTC().Format("2006-01-02")
		s.Commit = strings.TrimSpace(string(commit))
		s.Flags = *operatorArgs
		s.Plot = plotName(s)
		if err := os.MkdirAll(*results, 0o755); err != nil {
			fail(err)
		}
		if err := plotReady(filepath.Join(*results, s.Plot), s); err != nil {
			fail(err)
		}
		fresh = append(fresh, s)
	}
	if !*reuse && !*keep {
		if err := clusterScript(runConfig{root: root, clusterDir: *clusterDir, clusterName: *clusterName}, "down"); err != nil {
			fail(err)
		}
	}
	fmt.Println()
	writeTable(os.Stdout, fresh)
	old, err := readResults(resultsPath(*results))
	if err != nil {
		fail(err)
	}
	all := merge(old, fresh)
	if err := writeResults(resultsPath(*results), all); err != nil {
		fail(err)
	}
	fmt.Printf("\nbench: results merged into %s\n", resultsPath(*results))
	if g := growth(all); g != "" {
		fmt.Print(g)
	}
	if *benchmarks != "" {
		if err := updateBenchmarks(*benchmarks, all); err != nil {
			fail(err)
		}
		fmt.Printf("bench: %s updated\n", *benchmarks)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}
