package operator

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/cache-operator/e2e/framework"
)

// TestOperatorConfinedToItsNamespace: with --watch-namespace the operator reconciles the caches
// of that namespace and never touches another's: a cache created elsewhere before one of its own
// (which then became Ready, so the operator was at work after the other appeared) has no status,
// no child, no write of the operator's in its namespace and no line in its log. Its webhooks are
// another process's (--webhook-port=0): this cache is read through v1, converted by that one.
func TestOperatorConfinedToItsNamespace(t *testing.T) {
	parallel(t)
	c := framework.Setup(t)
	ctx := context.Background()
	mine, other := c.Namespace(t, "mine"), c.Namespace(t, "other")
	deleteCachesOnCleanup(t, c, mine)
	deleteCachesOnCleanup(t, c, other)
	since := time.Now()
	op := startOperatorIn(t, c, mine)
	createCache(t, c, mine, "a", sessionsSpec)
	waitReady(t, c, mine, "a", 3, 2*time.Minute)
	createCache(t, c, other, "b", sessionsSpec)
	createCache(t, c, mine, "c", sessionsSpec)
	waitReady(t, c, mine, "c", 3, 2*time.Minute)

	b, err := c.Dynamic.Resource(mcV2GVR).Namespace(other).Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st, ok := b.Object["status"]; ok {
		t.Errorf("the cache in %s, outside the operator's namespace, has a status: %v", other, st)
	}
	if f := b.GetFinalizers(); len(f) != 0 {
		t.Errorf("the cache in %s has finalizers %v", other, f)
	}
	for kind := range children {
		if _, err := getChild(c, kind, other, "b"); !apierrors.IsNotFound(err) {
			t.Errorf("%s of %s/b: want NotFound, got %v", kind, other, err)
		}
	}
	if w := operatorWrites(t, c, other, since); len(w) != 0 {
		t.Errorf("the operator wrote in %s: %v", other, w)
	}
	logged, err := os.ReadFile(op.log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(logged), other) {
		t.Errorf("the operator's log (%s) names %s", op.log, other)
	}
	if op.reconciles(mine, "c") == 0 {
		t.Errorf("the operator's log (%s) has no reconcile of %s/c, which it made Ready", op.log, mine)
	}
}
