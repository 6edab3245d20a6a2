package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/templates"
)

// operatorUser is the operator's ServiceAccount: the bench runs the operator as it, with the
// permissions manifests/rbac.yaml grants, so that the audit log records its every request.
const operatorUser = "system:serviceaccount:cache-operator-system:cache-operator"

// creators is how many requests the bench itself keeps in flight when it creates or changes
// caches, and when it applies the oracle's children.
const creators = 32

var (
	statefulSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
)

// runConfig is one measured run.
type runConfig struct {
	root         string
	clusterDir   string
	clusterName  string
	reuse        bool // measure on the running cluster as it is, and leave it running
	n            int
	foreign      int
	run          int
	idle         time.Duration
	logDir       string // the operator's log: operator-n<N>-f<foreign>-run<run>.log
	profile      bool   // save the operator's heap profiles (--profiling) into logDir
	operatorBin  string
	operatorArgs []string
	rollTimeout  time.Duration // the bound of the rolling change (0: phaseTimeout)
}

// runResult is what one run measured. Times are seconds from the first request of the phase.
type runResult struct {
	N       int `json:"n"`
	Foreign int `json:"foreign"`
	Run     int `json:"run"`

	OperatorS float64 `json:"operator_s"`
	OracleS   float64 `json:"oracle_s"`
	Ratio     float64 `json:"ratio"`

	Converge         requestCounts `json:"converge"`
	WritesPerCache   float64       `json:"writes_per_cache"`
	ReadsBeyondWatch int           `json:"reads_beyond_watch"`

	IdleWindowS  float64       `json:"idle_window_s"`
	IdleRequests int           `json:"idle_requests"`
	Idle         requestCounts `json:"idle"`

	// RollS is the seconds until every cache was Ready at its new generation; if the bound ran
	// out first, the bound, and RollReady tells how many were.
	RollS              float64       `json:"roll_s"`
	RollReady          int           `json:"roll_ready"`
	Roll               requestCounts `json:"roll"`
	RollWritesPerCache float64       `json:"roll_writes_per_cache"`

	PeakRSSMiB      float64 `json:"peak_rss_mib"`
	ConvergedRSSMiB float64 `json:"converged_rss_mib"`
	PeakHeapMiB     float64 `json:"peak_heap_mib"`
	// GCPercent is the operator's Go GC target (go_gc_gogc_percent), which sets the heap's
	// room for garbage above what is live.
	GCPercent    float64 `json:"gc_percent"`
	CPUS         float64 `json:"cpu_s"`
	CPUConvergeS float64 `json:"cpu_converge_s"`
	CPUIdleS     float64 `json:"cpu_idle_s"`
	CPURollS     float64 `json:"cpu_roll_s"`

	// The seconds at which each cache turned Ready, ascending: the plot's curves.
	OperatorCurve []float64 `json:"operator_curve,omitempty"`
	OracleCurve   []float64 `json:"oracle_curve,omitempty"`
}

func logf(format string, args ...interface{}) {
	fmt.Printf("bench: "+format+"\n", args...)
}

// phaseTimeout bounds the wait for N caches (or the oracle's N StatefulSets) to be Ready.
func phaseTimeout(n int) time.Duration { return 10*time.Minute + time.Duration(n)*600*time.Millisecond }

// sizeOf is cache i's size: 1, 2 and 3 in turn.
func sizeOf(i int) int64 { return int64(i%3 + 1) }

func cacheName(i int) string { return fmt.Sprintf("c%05d", i) }

// cacheObject is bench cache i: sizes 1-3 in turn, 1Gi volumes, allkeys-lru.
func cacheObject(ns string, i int) *unstructured.Unstructured {
	mc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": api.GroupVersion.String(),
		"kind":       api.Kind,
		"metadata":   map[string]interface{}{"name": cacheName(i), "namespace": ns},
		"spec": map[string]interface{}{
			"replicas": sizeOf(i),
			"engine":   map[string]interface{}{"version": "7.2"},
			"storage":  map[string]interface{}{"size": "1Gi"},
			"eviction": map[string]interface{}{"policy": "allkeys-lru"},
		},
	}}
	return mc
}

// oracleChildren renders cache i's children with the operator's engine, as they would be in ns,
// but unowned and without the operator's label (so that nothing of the operator sees them).
func oracleChildren(r *render.Renderer, ns string, i int) ([]*unstructured.Unstructured, error) {
	mc := cacheObject(ns, i)
	mc.SetUID(types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)))
	spec, err := api.SpecFrom(mc)
	if err != nil {
		return nil, err
	}
	objs, err := r.Children(mc, spec, render.DefaultConfig(), render.SimpleAuth(fmt.Sprintf("oracle-password-%d", i)))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		o.SetOwnerReferences(nil)
		relabel(o.Object, "metadata", "labels")
		relabel(o.Object, "spec", "template", "metadata", "labels")
	}
	return objs, nil
}

func relabel(obj map[string]interface{}, path ...string) {
	l, found, _ := unstructured.NestedStringMap(obj, path...)
	if !found || l[api.LabelManagedBy] == "" {
		return
	}
	l[api.LabelManagedBy] = "cache-bench-oracle"
	_ = unstructured.SetNestedStringMap(obj, l, path...)
}

// measureOperator runs the operator's half of a run on a running cluster: N caches until Ready,
// its requests, an idle window, a rolling change, its memory and CPU.
func measureOperator(ctx context.Context, cfg runConfig, res *runResult) error {
	// The phase's informers stop with it: the next phase's cluster may listen on the same port.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := connect(cfg)
	if err != nil {
		return err
	}
	opNS, cleanup, err := prepare(ctx, cfg, c, "bench-operator")
	defer cleanup()
	if err != nil {
		return err
	}
	if err := install(ctx, c); err != nil {
		return err
	}
	kubeconfig, err := saKubeconfig(ctx, c)
	if err != nil {
		return err
	}
	timeout := phaseTimeout(cfg.n)

	caches, err := track(ctx, c, api.Resource, opNS, cacheReady)
	if err != nil {
		return err
	}
	audit := newAuditReader(c.AuditLogPath(), operatorUser)
	if err := audit.skipToEnd(); err != nil {
		return err
	}

	// 1. The operator: N caches at once, until every one is Ready.
	opStart := time.Now()
	op, err := startOperator(cfg, kubeconfig)
	if err != nil {
		return err
	}
	defer op.stop()
	pid := op.cmd.Process.Pid
	samples := startSampler(op)
	names := make([]string, cfg.n)
	gens := map[string]int64{}
	for i := range names {
		names[i] = cacheName(i)
		gens[names[i]] = 1
	}
	logf("N=%d: creating %d caches (sizes 1-3)", cfg.n, cfg.n)
	start := time.Now()
	err = parallel(cfg.n, func(i int) error {
		_, err := c.Dynamic.Resource(api.Resource).Namespace(opNS).Create(ctx, cacheObject(opNS, i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating caches: %w", err)
	}
	res.OperatorCurve, err = caches.waitAll(names, gens, start, timeout, "every cache Ready")
	if err != nil {
		return err
	}
	res.OperatorS = res.OperatorCurve[len(res.OperatorCurve)-1]
	logf("N=%d: all Ready in %.1fs", cfg.n, res.OperatorS)
	converged, err := quiet(audit, start, 5*time.Second, 3*time.Minute)
	if err != nil {
		return err
	}
	res.Converge = countRequests(audit.between(opStart, converged), opNS)
	res.WritesPerCache = float64(res.Converge.InNamespace) / float64(cfg.n)
	res.ReadsBeyondWatch = res.Converge.Reads
	if res.CPUConvergeS, err = framework.CPUSeconds(pid); err != nil {
		return err
	}
	if res.ConvergedRSSMiB, _, err = framework.MemoryMiB(pid); err != nil {
		return err
	}
	logf("N=%d: converged; operator requests: %s", cfg.n, res.Converge.describe())
	if res.GCPercent, err = framework.Metric(op.metrics, "go_gc_gogc_percent"); err != nil {
		return err
	}
	if cfg.profile {
		saveProfile(op, filepath.Join(cfg.logDir, fmt.Sprintf("heap-n%d-f%d-run%d-converged.pprof", cfg.n, cfg.foreign, cfg.run)))
	}

	// 2. Idle: nothing changes, so nothing should be sent. (An observation window, not a wait.)
	idleStart := time.Now()
	time.Sleep(cfg.idle)
	idleEnd := time.Now()
	if _, err := audit.poll(); err != nil {
		return err
	}
	res.IdleWindowS = idleEnd.Sub(idleStart).Seconds()
	res.Idle = countRequests(audit.between(idleStart, idleEnd), opNS)
	res.IdleRequests = len(audit.between(idleStart, idleEnd))
	cpuIdle, err := framework.CPUSeconds(pid)
	if err != nil {
		return err
	}
	res.CPUIdleS = cpuIdle - res.CPUConvergeS
	logf("N=%d: %d requests in %.0fs idle", cfg.n, res.IdleRequests, res.IdleWindowS)

	// 3. A rolling change of every cache: a CPU request, which changes the pod template and so
	// restarts every member (the eviction policy, the change measured before, is applied live
	// since and rolls no pod).
	rollStart := time.Now()
	patch, _ := json.Marshal(map[string]interface{}{"spec": map[string]interface{}{"resources": map[string]interface{}{
		"requests": map[string]interface{}{"cpu": "50m"}}}})
	var gmu sync.Mutex
	err = parallel(cfg.n, func(i int) error {
		mc, err := c.Dynamic.Resource(api.Resource).Namespace(opNS).Patch(ctx, cacheName(i), types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			gmu.Lock()
			gens[mc.GetName()] = mc.GetGeneration()
			gmu.Unlock()
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("changing caches: %w", err)
	}
	rollTimeout := cfg.rollTimeout
	if rollTimeout <= 0 {
		rollTimeout = timeout
	}
	rollCurve, err := caches.waitAll(names, gens, rollStart, rollTimeout, "every cache rolled and Ready")
	res.RollReady = len(rollCurve)
	if err != nil {
		// Not fatal: the figures before it stand. The table shows how many rolled in the bound.
		logf("N=%d: the rolling change did not finish: %v", cfg.n, err)
		res.RollS = rollTimeout.Seconds()
	} else {
		res.RollS = rollCurve[len(rollCurve)-1]
	}
	// The roll's requests: until 5 s after the last cache was Ready at its new generation. (Not
	// "until quiet": under load, KWOK deletes a StatefulSet pod made anew by name, mistaking it
	// for the one deleted before, and the operator answers each of those deletions.)
	rolled := rollStart.Add(time.Duration(res.RollS*float64(time.Second)) + 5*time.Second)
	time.Sleep(time.Until(rolled)) // the end of a measured window, not a synchronisation
	if _, err := audit.poll(); err != nil {
		return err
	}
	res.Roll = countRequests(audit.between(rollStart, rolled), opNS)
	res.RollWritesPerCache = float64(res.Roll.InNamespace) / float64(cfg.n)
	cpuEnd, err := framework.CPUSeconds(pid)
	if err != nil {
		return err
	}
	res.CPURollS = cpuEnd - cpuIdle
	res.CPUS = cpuEnd
	if _, res.PeakRSSMiB, err = framework.MemoryMiB(pid); err != nil {
		return err
	}
	res.PeakHeapMiB = samples.stop()
	op.stop()
	logf("N=%d: %d of %d rolled and Ready in %.1fs; operator requests: %s", cfg.n, res.RollReady, cfg.n, res.RollS, res.Roll.describe())
	return nil
}

// measureOracle runs the oracle: the same children, rendered by the engine and applied directly
// (server-side apply, creators caches in flight), no operator; seconds until every StatefulSet
// reports all its pods ready and up to date.
func measureOracle(ctx context.Context, cfg runConfig, res *runResult) error {
	// The phase's informers stop with it: the next phase's cluster may listen on the same port.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := connect(cfg)
	if err != nil {
		return err
	}
	oracleNS, cleanup, err := prepare(ctx, cfg, c, "bench-oracle")
	defer cleanup()
	if err != nil {
		return err
	}
	timeout := phaseTimeout(cfg.n)
	names := make([]string, cfg.n)
	for i := range names {
		names[i] = cacheName(i)
	}
	renderer, err := render.NewRenderer(templates.FS)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube.Discovery()))
	sets, err := track(ctx, c, statefulSets, oracleNS, statefulSetReady)
	if err != nil {
		return err
	}
	oracleGens := map[string]int64{}
	for _, name := range names {
		oracleGens[name] = 1
	}
	start := time.Now()
	err = parallel(cfg.n, func(i int) error {
		objs, err := oracleChildren(renderer, oracleNS, i)
		if err != nil {
			return err
		}
		for _, o := range objs {
			m, err := mapper.RESTMapping(o.GroupVersionKind().GroupKind(), o.GroupVersionKind().Version)
			if err != nil {
				return err
			}
			body, err := json.Marshal(o.Object)
			if err != nil {
				return err
			}
			force := true
			if _, err := c.Dynamic.Resource(m.Resource).Namespace(oracleNS).Patch(ctx, o.GetName(), types.ApplyPatchType, body,
				metav1.PatchOptions{FieldManager: "cache-bench-oracle", Force: &force}); err != nil {
				return fmt.Errorf("applying %s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the oracle: %w", err)
	}
	res.OracleCurve, err = sets.waitAll(names, oracleGens, start, timeout, "every oracle StatefulSet ready")
	if err != nil {
		return err
	}
	res.OracleS = res.OracleCurve[len(res.OracleCurve)-1]
	logf("N=%d: oracle all ready in %.1fs", cfg.n, res.OracleS)
	return nil
}

// measure is one run: the oracle on a fresh cluster, then the operator on another fresh one, so
// that neither works beside the other's pods (with reuse, both in the running cluster, oracle
// first).
func measure(ctx context.Context, cfg runConfig) (*runResult, error) {
	res := &runResult{N: cfg.n, Foreign: cfg.foreign, Run: cfg.run}
	fresh := func(what string) error {
		if cfg.reuse {
			return nil
		}
		logf("N=%d run %d, %s: a fresh cluster %s (KWOK nodes, client limits lifted)", cfg.n, cfg.run, what, cfg.clusterName)
		if err := clusterScript(cfg, "down"); err != nil {
			return err
		}
		return clusterScript(cfg, "up")
	}
	if err := fresh("oracle"); err != nil {
		return nil, err
	}
	if err := measureOracle(ctx, cfg, res); err != nil {
		return nil, fmt.Errorf("the oracle: %w", err)
	}
	if err := fresh("operator"); err != nil {
		return nil, err
	}
	if err := measureOperator(ctx, cfg, res); err != nil {
		return nil, fmt.Errorf("the operator: %w", err)
	}
	res.Ratio = res.OperatorS / res.OracleS
	logf("N=%d run %d: operator %.1fs, oracle %.1fs, ratio %.3f", cfg.n, cfg.run, res.OperatorS, res.OracleS, res.Ratio)
	return res, nil
}
