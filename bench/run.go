package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

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

// clusterScript runs hack/cluster/cluster.sh for the bench cluster: KWOK nodes only, the client
// limits of kube-controller-manager and kube-scheduler lifted (and the API server's own), an
// audit log that is never rotated (auditReader reads it by offset).
func clusterScript(cfg runConfig, arg string) error {
	cmd := exec.Command(filepath.Join(cfg.root, "hack", "cluster", "cluster.sh"), arg)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+cfg.clusterName, "CLUSTER_DIR="+cfg.clusterDir,
		"DISABLE_QPS_LIMITS=1", "REAL_NODES=0", "AUDIT_LOG_MAX_MB=0")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

// poll calls cond until it is done or the timeout passes; the error says what was last seen.
func poll(timeout time.Duration, what string, cond func() (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, seen, err := cond()
		if done && err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s; last seen: %s (error: %v)", timeout, what, seen, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// parallel runs f(0..n-1) with creators calls in flight and returns the first error.
func parallel(n int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	work := make(chan int)
	for w := 0; w < creators; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port, nil
}

// readyTracker records, for every object it watches, when it first counted as ready for each
// generation.
type readyTracker struct {
	mu    sync.Mutex
	at    map[string]map[int64]time.Time
	ready func(*unstructured.Unstructured) (int64, bool)
}

func (r *readyTracker) observe(obj interface{}) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	gen, ok := r.ready(u)
	if !ok {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at[u.GetName()] == nil {
		r.at[u.GetName()] = map[int64]time.Time{}
	}
	if _, seen := r.at[u.GetName()][gen]; !seen {
		r.at[u.GetName()][gen] = now
	}
}

// readyAt returns when name was first ready at generation gen or later.
func (r *readyTracker) readyAt(name string, gen int64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var first time.Time
	for g, t := range r.at[name] {
		if g >= gen && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first, !first.IsZero()
}

// waitAll waits until every name is ready at its generation and returns the seconds from start
// at which each turned ready, ascending.
func (r *readyTracker) waitAll(names []string, gens map[string]int64, start time.Time, timeout time.Duration, what string) ([]float64, error) {
	var curve []float64
	err := poll(timeout, what, func() (bool, string, error) {
		curve = curve[:0]
		for _, name := range names {
			if t, ok := r.readyAt(name, gens[name]); ok {
				curve = append(curve, t.Sub(start).Seconds())
			}
		}
		return len(curve) == len(names), fmt.Sprintf("%d of %d ready", len(curve), len(names)), nil
	})
	sort.Float64s(curve)
	return curve, err
}

// track starts an informer on gvr in ns that feeds a readyTracker.
func track(ctx context.Context, c *framework.Cluster, gvr schema.GroupVersionResource, ns string, ready func(*unstructured.Unstructured) (int64, bool)) (*readyTracker, error) {
	r := &readyTracker{at: map[string]map[int64]time.Time{}, ready: ready}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(c.Dynamic, 0, ns, nil)
	inf := f.ForResource(gvr).Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    r.observe,
		UpdateFunc: func(_, cur interface{}) { r.observe(cur) },
	}); err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, fmt.Errorf("the informer of %s did not sync", gvr.Resource)
	}
	return r, nil
}

// cacheReady: Ready is True for the cache's current generation.
func cacheReady(u *unstructured.Unstructured) (int64, bool) {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, raw := range conds {
		cond, _ := raw.(map[string]interface{})
		if cond["type"] != "Ready" || cond["status"] != "True" {
			continue
		}
		gen, _, _ := unstructured.NestedInt64(cond, "observedGeneration")
		return gen, gen == u.GetGeneration()
	}
	return 0, false
}

// statefulSetReady: every wanted pod is ready and up to date, as the StatefulSet controller reports.
func statefulSetReady(u *unstructured.Unstructured) (int64, bool) {
	want, _, _ := unstructured.NestedInt64(u.Object, "spec", "replicas")
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	ready, _, _ := unstructured.NestedInt64(u.Object, "status", "readyReplicas")
	updated, _, _ := unstructured.NestedInt64(u.Object, "status", "updatedReplicas")
	return u.GetGeneration(), observed >= u.GetGeneration() && ready == want && updated == want
}

// operatorProcess is the operator under measurement.
type operatorProcess struct {
	cmd     *exec.Cmd
	metrics string
	log     string
}

func startOperator(cfg runConfig, kubeconfig string) (*operatorProcess, error) {
	var ports [3]string
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	if err := os.MkdirAll(cfg.logDir, 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(cfg.logDir, fmt.Sprintf("operator-n%d-f%d-run%d.log", cfg.n, cfg.foreign, cfg.run))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Default flags, except where the local cluster needs its own: the pods of KWOK nodes have
	// addresses that lead nowhere, so the operator may dial only the real nodes' range (as make up).
	args := append([]string{"--kubeconfig", kubeconfig, "--member-networks", framework.MemberNetworks,
		"--webhook-port", ports[0], "--metrics-bind-address", "127.0.0.1:" + ports[1],
		"--health-probe-bind-address", "127.0.0.1:" + ports[2]}, cfg.operatorArgs...)
	if cfg.profile {
		args = append(args, "--profiling")
	}
	cmd := exec.Command(cfg.operatorBin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	// If the bench dies, the operator goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	op := &operatorProcess{cmd: cmd, metrics: "127.0.0.1:" + ports[1], log: logPath}
	err = poll(time.Minute, "the operator to serve (/readyz)", func() (bool, string, error) {
		if cmd.ProcessState != nil {
			return false, "exited", fmt.Errorf("the operator exited; see %s", logPath)
		}
		resp, err := http.Get("http://127.0.0.1:" + ports[2] + "/readyz")
		if err != nil {
			return false, "", err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		op.stop()
	}
	return op, err
}

// saveProfile saves the operator's heap profile (it serves them with --profiling).
func saveProfile(op *operatorProcess, path string) {
	resp, err := http.Get("http://" + op.metrics + "/debug/pprof/heap")
	if err != nil {
		logf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		logf("heap profile: %v", err)
		return
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		logf("heap profile: %v", err)
		return
	}
	logf("heap profile saved: %s", path)
}

func (o *operatorProcess) stop() {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	_ = o.cmd.Wait()
}

// sampler follows the peak of the operator's Go heap (its /metrics, every second).
type sampler struct {
	mu       sync.Mutex
	pid      int
	metrics  string
	peakHeap float64
	stopped  chan struct{}
	done     chan struct{}
}

func startSampler(op *operatorProcess) *sampler {
	s := &sampler{pid: op.cmd.Process.Pid, metrics: op.metrics, stopped: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if heap, err := framework.Metric(s.metrics, "go_memstats_heap_inuse_bytes"); err == nil {
				s.mu.Lock()
				s.peakHeap = max(s.peakHeap, heap/(1<<20))
				s.mu.Unlock()
			}
			select {
			case <-s.stopped:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) stop() float64 {
	close(s.stopped)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peakHeap
}

// quiet waits until the operator has sent no request for the given time (it may still be
// writing the last statuses when the last cache turns Ready), and returns when its last request
// was received.
func quiet(audit *auditReader, after time.Time, still, timeout time.Duration) (time.Time, error) {
	var last time.Time
	err := poll(timeout, fmt.Sprintf("the operator to send no request for %s", still), func() (bool, string, error) {
		if _, err := audit.poll(); err != nil {
			return false, "", err
		}
		last = audit.last()
		if last.Before(after) {
			last = after
		}
		return time.Since(last) >= still, fmt.Sprintf("last request %s ago", time.Since(last).Round(time.Second)), nil
	})
	return last.Add(time.Millisecond), err
}

// saKubeconfig writes a kubeconfig that authenticates as the operator's ServiceAccount.
func saKubeconfig(ctx context.Context, c *framework.Cluster) (string, error) {
	token, err := c.Kubectl(ctx, "create", "token", "cache-operator", "-n", "cache-operator-system", "--duration=24h")
	if err != nil {
		return "", err
	}
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	for name := range kc.AuthInfos {
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	}
	path := filepath.Join(c.Dir, "bench-operator.kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// install puts the CRD, the operator's namespace and its RBAC into the cluster.
func install(ctx context.Context, c *framework.Cluster) error {
	steps := [][]string{
		{"apply", "--server-side", "--force-conflicts", "-k", filepath.Join(c.Root, "crd")},
		{"wait", "--for=condition=Established", "crd/managedcaches.cache.example.com", "--timeout=60s"},
	}
	for _, s := range steps {
		if _, err := c.Kubectl(ctx, s...); err != nil {
			return err
		}
	}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cache-operator-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-n", "cache-operator-system", "-f", filepath.Join(c.Root, "manifests", "rbac.yaml"))
	return err
}

// kwokNamespace creates a namespace whose pods run on the KWOK nodes.
func kwokNamespace(ctx context.Context, c *framework.Cluster, prefix string) (string, error) {
	name := fmt.Sprintf("%s-%04x", prefix, rand.IntN(1<<16))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: framework.KwokNamespaceAnnotations,
		Labels: map[string]string{guardLabel: "true"}}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	return name, poll(time.Minute, "the default ServiceAccount of "+name, func() (bool, string, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, "", err
	})
}

// guardLabel marks the bench's namespaces for guardKwokDeletes.
const guardLabel = "bench.cache.example.com/guard-kwok-deletes"

// guardKwokDeletes installs a ValidatingAdmissionPolicy that refuses KWOK's stale pod deletes in
// the bench's namespaces. KWOK finishes a pod's deletion with a delete by name with grace period
// 0 and no UID precondition (a kubelet sends the UID). When its queue lags, such a delete arrives
// after the StatefulSet controller has made the pod anew under the same name and removes the new
// pod, again and again: the rolling change then measures KWOK, not the operator. The policy
// refuses, from KWOK's user only, a grace-0 delete of a pod that is not being deleted; KWOK drops
// the refused delete.
func guardKwokDeletes(ctx context.Context, c *framework.Cluster) error {
	const name = "bench-kwok-stale-pod-deletes"
	ignore := admissionregistrationv1.Ignore
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &ignore,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "kwok", Expression: "request.userInfo.username == 'kwok-admin'"}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "has(oldObject.metadata.deletionTimestamp) || !(has(request.options.gracePeriodSeconds) && request.options.gracePeriodSeconds == 0)",
				Message:    "refused by the bench: a grace-0 delete by name of a pod that is not being deleted (a stale delete of KWOK's)",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{guardLabel: "true"},
			}},
		},
	}
	adm := c.Kube.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the policy against KWOK's stale deletes: %w", err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the policy against KWOK's stale deletes: %w", err)
	}
	return nil
}

// kwokCapacity adds simulated nodes (like hack/cluster/nodes.yaml's) until the KWOK nodes hold
// pods pods with a fifth to spare, and returns the names of those it added.
func kwokCapacity(ctx context.Context, c *framework.Cluster, pods int64) ([]string, error) {
	list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return nil, err
	}
	var capacity int64
	for _, n := range list.Items {
		capacity += n.Status.Allocatable.Pods().Value()
	}
	const perNode = 500
	var added []string
	for i := 0; capacity < pods*6/5; i++ {
		name := fmt.Sprintf("kwok-bench-%02d", i)
		zone := string(rune('a' + i%3))
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"kubernetes.io/role": "agent", "type": "kwok", "topology.kubernetes.io/zone": zone}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods: *resource.NewQuantity(perNode, resource.DecimalSI)}
		node.Status.Allocatable, node.Status.Capacity = alloc, alloc
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return added, err
		}
		added = append(added, name)
		capacity += perNode
	}
	return added, poll(2*time.Minute, "the KWOK nodes Ready", func() (bool, string, error) {
		list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, "", err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(list.Items), fmt.Sprintf("%d of %d Ready", ready, len(list.Items)), nil
	})
}

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

// connect connects to the bench cluster with the bench's own requests unthrottled.
func connect(cfg runConfig) (*framework.Cluster, error) {
	c, err := framework.Connect(cfg.clusterDir, cfg.clusterName, "cache-bench")
	if err != nil {
		return nil, err
	}
	c.Config.QPS = -1
	// A dialer of its own keeps client-go from reusing a transport it cached for the previous
	// cluster of the same name (the key is the kubeconfig's certificate file paths, and a fresh
	// cluster has a new CA at the same path).
	c.Config.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// prepare gives the cluster room for the caches' pods (and, with reuse, the oracle's too),
// a KWOK namespace named after prefix, and the foreign objects. It returns the namespace and a
// cleanup that, with reuse, leaves the cluster as it was found.
func prepare(ctx context.Context, cfg runConfig, c *framework.Cluster, prefix string) (string, func(), error) {
	var pods int64
	for i := 0; i < cfg.n; i++ {
		pods += sizeOf(i)
	}
	if cfg.reuse {
		pods *= 2 // the oracle's pods stay while the operator's come
	}
	var namespaces []string
	var addedNodes []string
	cleanup := func() {
		if !cfg.reuse {
			return
		}
		for _, ns := range namespaces {
			_ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
		for _, n := range addedNodes {
			_ = c.Kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	}
	if err := guardKwokDeletes(ctx, c); err != nil {
		return "", cleanup, err
	}
	var err error
	if addedNodes, err = kwokCapacity(ctx, c, pods); err != nil {
		return "", cleanup, err
	}
	ns, err := kwokNamespace(ctx, c, prefix)
	if err != nil {
		return "", cleanup, err
	}
	namespaces = append(namespaces, ns)
	if cfg.foreign > 0 {
		foreignNS, err := kwokNamespace(ctx, c, prefix+"-foreign")
		if err != nil {
			return "", cleanup, err
		}
		namespaces = append(namespaces, foreignNS)
		start := time.Now()
		if err := c.CreateForeignObjects(ctx, foreignNS, cfg.foreign); err != nil {
			return "", cleanup, err
		}
		logf("%d foreign objects (Secrets, Services, StatefulSets) created in %s", cfg.foreign, time.Since(start).Round(time.Second))
	}
	return ns, cleanup, nil
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
