package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"example.com/cache-operator/e2e/framework"
)

// TestManifestsDryRun: the deploy manifests are accepted by the API server of a cluster that has
// never seen the operator (this package runs before e2e/operator installs anything).
func TestManifestsDryRun(t *testing.T) {
	c := framework.Setup(t)
	ctx := context.Background()
	if _, err := c.Kubectl(ctx, "get", "namespace", "cache-operator-system"); err != nil {
		if _, err := c.Kubectl(ctx, "create", "namespace", "cache-operator-system"); err != nil {
			t.Fatal(err)
		}
	}
	out, err := c.Kubectl(ctx, "apply", "--server-side", "--dry-run=server", "-k", filepath.Join(c.Root, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"deployment.apps/cache-operator", "clusterrole.rbac.authorization.k8s.io/cache-operator", "serviceaccount/cache-operator",
		"role.rbac.authorization.k8s.io/cache-operator-namespaced", "service/cache-operator-webhook", "service/cache-operator-metrics",
		"poddisruptionbudget.policy/cache-operator",
		"customresourcedefinition.apiextensions.k8s.io/managedcaches.cache.example.com",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run did not apply %s:\n%s", want, out)
		}
	}
}
