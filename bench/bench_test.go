package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSummarizeTakesMediansAndTheMedianRunsBreakdown(t *testing.T) {
	runs := []runResult{
		{N: 10, Run: 1, OperatorS: 30, OracleS: 20, PeakRSSMiB: 50, CPUS: 2, Converge: requestCounts{Writes: 1}},
		{N: 10, Run: 2, OperatorS: 10, OracleS: 10, PeakRSSMiB: 70, CPUS: 4, Converge: requestCounts{Writes: 2}},
		{N: 10, Run: 3, OperatorS: 20, OracleS: 30, PeakRSSMiB: 60, CPUS: 3, Converge: requestCounts{Writes: 3}},
	}
	s := summarize(runs)
	if s.Runs != 3 || s.OperatorS != 20 || s.OracleS != 20 || s.PeakRSSMiB != 60 || s.CPUS != 3 || s.CPUMsPerCache != 300 {
		t.Errorf("summary %+v", s)
	}
	if s.Run != 3 || s.Converge.Writes != 3 {
		t.Errorf("the breakdown should be the median run's (run 3), got run %d with %d writes", s.Run, s.Converge.Writes)
	}
}

func TestMergeReplacesTheSameConfiguration(t *testing.T) {
	old := []summary{{runResult: runResult{N: 300, OperatorS: 1}}, {runResult: runResult{N: 100, OperatorS: 2}}, {runResult: runResult{N: 100, Foreign: 10, OperatorS: 3}}}
	fresh := []summary{{runResult: runResult{N: 100, OperatorS: 9}}}
	got := merge(old, fresh)
	var keys []string
	for _, s := range got {
		keys = append(keys, strings.Join([]string{strconv.Itoa(s.N), strconv.Itoa(s.Foreign), strconv.Itoa(int(s.OperatorS))}, "/"))
	}
	if want := "100/0/9 300/0/1 100/10/3"; strings.Join(keys, " ") != want {
		t.Errorf("merged %v, want %s", keys, want)
	}
}

func TestCountRequests(t *testing.T) {
	reqs := []request{
		{verb: "create", resource: "secrets", namespace: "a"},
		{verb: "patch", resource: "pods", namespace: "a"},
		{verb: "update", resource: "managedcaches.cache.example.com/status", namespace: "a"},
		{verb: "create", resource: "events", namespace: "a"},
		{verb: "create", resource: "validatingwebhookconfigurations.admissionregistration.k8s.io"},
		{verb: "list", resource: "pods"}, {verb: "watch", resource: "pods"},
		{verb: "get", resource: "statefulsets.apps", namespace: "a"},
	}
	c := countRequests(reqs, "a")
	if c.Writes != 5 || c.InNamespace != 4 || c.ListWatch != 2 || c.Reads != 1 || c.InNamespaceByVerb["CREATE secrets"] != 1 ||
		c.InNamespaceByVerb["CREATE validatingwebhookconfigurations.admissionregistration.k8s.io"] != 0 {
		t.Errorf("counts %+v", c)
	}
	if d := c.describe(); !strings.HasPrefix(d, "CREATE events: 1, CREATE secrets: 1") || !strings.Contains(d, "GET statefulsets.apps: 1") {
		t.Errorf("describe: %s", d)
	}
}

func TestAuditReaderKeepsOneUsersRequestsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	lines := `{"auditID":"1","stage":"ResponseComplete","verb":"create","user":{"username":"op"},"objectRef":{"resource":"secrets","namespace":"a"},"requestReceivedTimestamp":"2026-12-01T00:00:01Z"}
{"auditID":"2","stage":"ResponseStarted","verb":"watch","user":{"username":"op"},"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2026-12-01T00:00:02Z"}
{"auditID":"2","stage":"ResponseComplete","verb":"watch","user":{"username":"op"},"objectRef":{"resource":"pods"},"requestReceivedTimestamp":"2026-12-01T00:00:02Z"}
{"auditID":"3","stage":"ResponseComplete","verb":"create","user":{"username":"someone"},"objectRef":{"resource":"secrets","namespace":"a"},"requestReceivedTimestamp":"2026-12-01T00:00:03Z"}
{"auditID":"4","stage":"ResponseComplete","verb":"patch","user":{"username":"op"},"objectRef":{"resource":"statefulsets","apiGroup":"apps","namespace":"a"},"requestReceivedTimestamp":"2026-12-01T00:00:04Z"}
{"auditID":"5","stage":"Respon`
	if err := os.WriteFile(path, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newAuditReader(path, "op")
	if n, err := a.poll(); err != nil || n != 3 {
		t.Fatalf("poll: %d requests, %v; want 3", n, err)
	}
	// The partial last line is read once it is whole.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`seComplete","verb":"get","user":{"username":"op"},"objectRef":{"resource":"pods","namespace":"a"},"requestReceivedTimestamp":"2026-12-01T00:00:05Z"}` + "\n")
	f.Close()
	if n, err := a.poll(); err != nil || n != 1 {
		t.Fatalf("second poll: %d requests, %v; want 1", n, err)
	}
	from, _ := time.Parse(time.RFC3339, "2026-12-01T00:00:02Z")
	to, _ := time.Parse(time.RFC3339, "2026-12-01T00:00:05Z")
	got := countRequests(a.between(from, to), "a")
	if got.ListWatch != 1 || got.Writes != 1 || got.ByVerb["PATCH statefulsets.apps"] != 1 || got.Reads != 0 {
		t.Errorf("between 2s and 5s: %+v", got)
	}
}

// A rotated audit log (a new file, or a shorter one) is an error: its requests cannot be counted.
func TestAuditReaderRefusesARotatedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	line := `{"auditID":"1","stage":"ResponseComplete","verb":"create","user":{"username":"op"},"objectRef":{"resource":"secrets","namespace":"a"},"requestReceivedTimestamp":"2026-12-01T00:00:01Z"}` + "\n"
	if err := os.WriteFile(path, []byte(line+strings.Replace(line, `"1"`, `"2"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	a := newAuditReader(path, "op")
	if n, err := a.poll(); err != nil || n != 2 {
		t.Fatalf("poll: %d requests, %v; want 2", n, err)
	}
	// As lumberjack rotates: the file is renamed and a new one takes its name.
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Repeat(line, 3)), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := a.poll(); err == nil {
		t.Errorf("after a rotation: %d requests and no error; want an error", n)
	}
}

func TestProcessStats(t *testing.T) {
	cpu, err := framework.CPUSeconds(os.Getpid())
	if err != nil || cpu < 0 {
		t.Fatalf("cpuSeconds: %v, %v", cpu, err)
	}
	rss, peak, err := framework.MemoryMiB(os.Getpid())
	if err != nil || rss <= 0 || peak < rss {
		t.Fatalf("memoryMiB: rss %v peak %v, %v", rss, peak, err)
	}
}

// TestBenchOnTheTestCluster runs the whole benchmark, small, on the end-to-end test cluster:
// every phase, the table, the JSON, the plot and the BENCHMARKS.md section. It asserts what the
// figures must be whatever the machine (every cache Ready in both halves, the operator's own
// writes seen in the audit log), never timings.
func TestBenchOnTheTestCluster(t *testing.T) {
	c := framework.Setup(t)
	bin := filepath.Join(t.TempDir(), "cache-operator")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = c.Root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the operator: %v\n%s", err, out)
	}
	const n = 6
	res, err := measure(context.Background(), runConfig{root: c.Root, clusterDir: c.Dir, clusterName: c.Name, reuse: true,
		n: n, run: 1, idle: 3 * time.Second, logDir: c.Dir, operatorBin: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("measured: %+v", res.Converge)
	if len(res.OperatorCurve) != n || len(res.OracleCurve) != n || res.OperatorS <= 0 || res.OracleS <= 0 || res.RollS <= 0 || res.RollReady != n {
		t.Errorf("curves %v and %v, times %v, %v, roll %v with %d Ready: want %d caches Ready in both and rolled, positive times",
			res.OperatorCurve, res.OracleCurve, res.OperatorS, res.OracleS, res.RollS, res.RollReady, n)
	}
	// Each cache's seven children (Secret, ConfigMap, three Services, StatefulSet, budget) were
	// created by the operator, once, in the caches' namespace, and the audit log saw them. (The
	// dry-run creates that learn the API server's defaults go to the operator's namespace.)
	created := res.Converge.InNamespaceByVerb
	if created["CREATE secrets"] != n || created["CREATE configmaps"] != n || created["CREATE services"] != 3*n ||
		created["CREATE statefulsets.apps"] != n || created["CREATE poddisruptionbudgets.policy"] != n || res.WritesPerCache < 7 {
		t.Errorf("%.2f writes per cache, in the caches' namespace %v; want the 7 children of each created once", res.WritesPerCache, created)
	}
	if res.Converge.ListWatch == 0 || res.Roll.Writes == 0 {
		t.Errorf("no list/watch while converging or no write while rolling: %s / %s", res.Converge.describe(), res.Roll.describe())
	}
	if res.GCPercent != 25 {
		t.Errorf("the operator's Go GC target is %v; want the default --gc-percent, 25", res.GCPercent)
	}
	if res.PeakRSSMiB <= 0 || res.CPUS <= 0 || res.PeakHeapMiB <= 0 {
		t.Errorf("process figures: peak RSS %v MiB, CPU %v s, heap %v MiB", res.PeakRSSMiB, res.CPUS, res.PeakHeapMiB)
	}

	dir := t.TempDir()
	s := summarize([]runResult{*res})
	s.Plot = plotName(s)
	if err := plotReady(filepath.Join(dir, s.Plot), s); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, s.Plot))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width < 100 {
		t.Errorf("the plot is not a PNG: %v (%+v)", err, cfg)
	}
	if err := writeResults(resultsPath(dir), []summary{s}); err != nil {
		t.Fatal(err)
	}
	back, err := readResults(resultsPath(dir))
	if err != nil || len(back) != 1 || back[0].N != n || back[0].OperatorS != s.OperatorS {
		t.Fatalf("latest.json read back: %+v, %v", back, err)
	}
	raw, _ := os.ReadFile(resultsPath(dir))
	for _, field := range []string{`"n"`, `"operator_s"`, `"oracle_s"`, `"ratio"`, `"writes_per_cache"`, `"reads_beyond_watch"`, `"idle_requests"`, `"peak_rss_mib"`, `"cpu_s"`} {
		if !bytes.Contains(raw, []byte(field)) {
			t.Errorf("latest.json lacks %s", field)
		}
	}
	doc := filepath.Join(dir, "BENCHMARKS.md")
	os.WriteFile(doc, []byte("# B\n"+beginMarker+"\nold\n"+endMarker+"\nafter\n"), 0o644)
	if err := updateBenchmarks(doc, back); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(doc)
	if !strings.Contains(string(md), "| 6 | 0 | 1 |") || strings.Contains(string(md), "old") || !strings.HasSuffix(string(md), endMarker+"\nafter\n") {
		t.Errorf("BENCHMARKS.md section:\n%s", md)
	}
	var table bytes.Buffer
	writeTable(&table, back)
	t.Logf("\n%s", table.String())
}

// The guard against KWOK's stale deletes refuses, from KWOK's user (the local cluster's admin),
// a grace-0 delete of a simulated pod that is not being deleted, and lets the deletion of a pod
// that is being deleted finish.
func TestGuardRefusesKwokStaleDeletes(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	if err := guardKwokDeletes(ctx, c); err != nil {
		t.Fatal(err)
	}
	ns, err := kwokNamespace(ctx, c, "bench-guard")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) }()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}}}
	// A pod on a KWOK node (the API server itself deletes an unscheduled pod at once, grace 0).
	scheduled := func() error {
		if _, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return poll(time.Minute, "the pod scheduled", func() (bool, string, error) {
			p, err := c.Kube.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			return p.Spec.NodeName != "", "not yet", nil
		})
	}
	if err := scheduled(); err != nil {
		t.Fatal(err)
	}
	// The policy takes effect once the API server has loaded it: until then a stale delete goes
	// through, so the pod is made anew until one is refused.
	var refused error
	err = poll(time.Minute, "a grace-0 delete of a pod that is not being deleted refused", func() (bool, string, error) {
		err := c.Kube.CoreV1().Pods(ns).Delete(ctx, "p", *metav1.NewDeleteOptions(0))
		switch {
		case apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
			refused = err
			return true, "", nil
		case err == nil || apierrors.IsNotFound(err):
			if err := waitGone(ctx, c, ns, "p"); err != nil {
				return false, "", err
			}
			return false, "the delete went through", scheduled()
		}
		return false, "", err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(refused.Error(), "stale delete") {
		t.Errorf("refused with %v; want the policy's message", refused)
	}
	// A graceful delete marks the pod; KWOK's grace-0 delete of the marked pod then goes through.
	if err := c.Kube.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(ctx, c, ns, "p"); err != nil {
		t.Fatal(err)
	}
}

func waitGone(ctx context.Context, c *framework.Cluster, ns, name string) error {
	return poll(time.Minute, "pod "+name+" gone", func() (bool, string, error) {
		_, err := c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		return false, "still there", err
	})
}
