package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"example.com/cache-operator/e2e/framework"
)

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
