package operator

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"example.com/cache-operator/e2e/framework"
	"example.com/cache-operator/engine/dataset"
)

var mcbGVR = schema.GroupVersionResource{Group: "cache.example.com", Version: "v2", Resource: "managedcachebackups"}

// createCacheV2 creates a cache from a v2 spec (backup and restore are v2 fields).
func createCacheV2(t *testing.T, c *framework.Cluster, ns, name string, spec map[string]interface{}) {
	t.Helper()
	mc := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cache.example.com/v2", "kind": "ManagedCache",
		"metadata": map[string]interface{}{"name": name, "namespace": ns}, "spec": spec,
	}}
	if _, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Create(context.Background(), mc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ManagedCache %s/%s: %v", ns, name, err)
	}
}

// v2Spec is a small v2 spec of n members of redis 7.0 with extra fields.
func v2Spec(n int64, extra map[string]interface{}) map[string]interface{} {
	s := map[string]interface{}{
		"replicas": n, "engine": map[string]interface{}{"name": "redis", "version": "7.0"},
		"storage": map[string]interface{}{"size": "1Gi"},
	}
	for k, v := range extra {
		s[k] = v
	}
	return s
}

// createBackup creates a ManagedCacheBackup of cache.
func createBackup(t *testing.T, c *framework.Cluster, ns, name, cache string) {
	t.Helper()
	b := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "cache.example.com/v2", "kind": "ManagedCacheBackup",
		"metadata": map[string]interface{}{"name": name, "namespace": ns}, "spec": map[string]interface{}{"cache": cache},
	}}
	if _, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).Create(context.Background(), b, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ManagedCacheBackup %s/%s: %v", ns, name, err)
	}
}

// backupStatus is a ManagedCacheBackup's status, as the test reads it.
type backupStatus struct {
	Phase, Reason, Message, Member, Location, Checksum, Engine, Version, StartTime, EndTime string
	Bytes, Keys                                                                             int64
}

func readBackup(b *unstructured.Unstructured) backupStatus {
	s := func(f string) string { v, _, _ := unstructured.NestedString(b.Object, "status", f); return v }
	n := func(f string) int64 { v, _, _ := unstructured.NestedInt64(b.Object, "status", f); return v }
	return backupStatus{Phase: s("phase"), Reason: s("reason"), Message: s("message"), Member: s("member"), Location: s("location"),
		Checksum: s("checksum"), Engine: s("engine"), Version: s("version"), StartTime: s("startTime"), EndTime: s("endTime"),
		Bytes: n("bytes"), Keys: n("keys")}
}

// waitBackup waits until the backup is Completed or Failed and returns its status.
func waitBackup(t *testing.T, c *framework.Cluster, ns, name string, timeout time.Duration) backupStatus {
	t.Helper()
	var st backupStatus
	framework.Eventually(t, timeout, "backup "+ns+"/"+name+" to finish", func() (bool, string, error) {
		b, err := c.Dynamic.Resource(mcbGVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		st = readBackup(b)
		return st.Phase == "Completed" || st.Phase == "Failed", fmt.Sprintf("phase %q reason %q: %s", st.Phase, st.Reason, st.Message), nil
	})
	return st
}

// memberClient is a client of the cache's member pod as the clients' user.
func memberClient(t *testing.T, c *framework.Cluster, ns, cache, pod string) *redis.Client {
	t.Helper()
	p, err := c.Kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(&redis.Options{Addr: p.Status.PodIP + ":6379", Password: password(t, c, ns, cache), MaxRetries: -1,
		ReadTimeout: 30 * time.Second})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// fillKeys writes n keys of several types through cl, in pipelines.
func fillKeys(t *testing.T, cl *redis.Client, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	pipe := cl.Pipeline()
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("%s:%07d", prefix, i)
		switch i % 5 {
		case 0, 1:
			pipe.Set(ctx, k, strings.Repeat("v", 10+i%200), 0)
		case 2:
			pipe.HSet(ctx, k, "a", i, "b", "x")
		case 3:
			pipe.RPush(ctx, k, i, "two")
		case 4:
			pipe.ZAdd(ctx, k, redis.Z{Score: float64(i), Member: "m"})
		}
		if i%2000 == 1999 || i == n-1 {
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("filling %s: %v", prefix, err)
			}
		}
	}
}

func fingerprint(t *testing.T, cl *redis.Client) dataset.Fingerprint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := dataset.Of(ctx, cl)
	if err != nil {
		t.Fatalf("fingerprint: %v", err)
	}
	return f
}

// infoStat reads one field of INFO section on an internal client of the member at ip.
func infoStat(t *testing.T, c *framework.Cluster, ns, cache, ip, section, field string) string {
	t.Helper()
	cl := internalClient(t, c, ns, cache, ip)
	info, err := cl.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatalf("INFO %s on %s: %v", section, ip, err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:(\S+)`).FindStringSubmatch(info)
	if m == nil {
		t.Fatalf("INFO %s on %s has no %s", section, ip, field)
	}
	return m[1]
}

// cacheEvents returns "<type> <reason>: <message>" of the Events about the cache.
func cacheEvents(t *testing.T, c *framework.Cluster, ns, name string) []string {
	t.Helper()
	evs, err := c.Kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Type+" "+e.Reason+": "+e.Message)
	}
	return out
}

// waitEvent waits for an Event about the object with reason (and type).
func waitEvent(t *testing.T, c *framework.Cluster, ns, name, typ, reason string, timeout time.Duration) string {
	t.Helper()
	var found string
	framework.Eventually(t, timeout, fmt.Sprintf("a %s Event %s about %s", typ, reason, name), func() (bool, string, error) {
		evs := cacheEvents(t, c, ns, name)
		for _, e := range evs {
			if strings.HasPrefix(e, typ+" "+reason+":") {
				found = e
				return true, e, nil
			}
		}
		return false, fmt.Sprint(evs), nil
	})
	return found
}

// condition returns the status, reason and message of the cache's condition t.
func condition(t *testing.T, c *framework.Cluster, ns, name, typ string) (string, string, string) {
	t.Helper()
	mc, err := c.Dynamic.Resource(mcV2GVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(mc.Object, "status", "conditions")
	for _, cc := range conds {
		m, _ := cc.(map[string]interface{})
		if m["type"] == typ {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"]), fmt.Sprint(m["message"])
		}
	}
	return "", "", ""
}

// waitCondition waits until the cache's condition typ has status and reason.
func waitCondition(t *testing.T, c *framework.Cluster, ns, name, typ, status, reason string, timeout time.Duration) string {
	t.Helper()
	return waitConditionSaying(t, c, ns, name, typ, status, reason, "", timeout)
}

// waitConditionSaying waits until the cache's condition typ has status and reason, and its
// message contains text.
func waitConditionSaying(t *testing.T, c *framework.Cluster, ns, name, typ, status, reason, text string, timeout time.Duration) string {
	t.Helper()
	var msg string
	framework.Eventually(t, timeout, fmt.Sprintf("%s/%s condition %s=%s (%s) saying %q", ns, name, typ, status, reason, text), func() (bool, string, error) {
		s, r, m := condition(t, c, ns, name, typ)
		msg = m
		return s == status && r == reason && strings.Contains(m, text), fmt.Sprintf("%s=%s reason %s: %s", typ, s, r, m), nil
	})
	return msg
}

var _ = corev1.EventTypeWarning

// dumpBackupsOnFailure logs, when t fails, what a backup's progress passes through: the backups'
// phases, their Jobs and the Jobs' pods (phase, node, the backup container's last lines).
func dumpBackupsOnFailure(t *testing.T, c *framework.Cluster, ns string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := c.Kubectl(ctx, "get", "managedcachebackups.cache.example.com,jobs,pods", "-n", ns, "-o", "wide")
		t.Logf("backups, Jobs and pods in %s (%v):\n%s", ns, err, out)
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "job-name"})
		if err != nil {
			t.Logf("the Jobs' pods: %v", err)
			return
		}
		for _, p := range pods.Items {
			out, err := c.Kubectl(ctx, "logs", "-n", ns, p.Name, "--all-containers", "--tail", "10", "--timestamps")
			t.Logf("Job pod %s (%s, %s on %s): kubectl logs (%v):\n%s", p.Name, p.Labels["job-name"], p.Status.Phase, p.Spec.NodeName, err, out)
		}
	})
}
