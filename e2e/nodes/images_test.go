package nodes

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"example.com/cache-operator/e2e/framework"
)

// TestImagesAreTheirOwnRoots: a container's root is its image's (localcluster/node/images.yaml), built
// from Debian packages: redis:8.0 runs trixie's redis-server 8.0 on trixie's libc, redis:7.2 runs
// bookworm's 7.0 (the table's note says so, and the imageID names the version), valkey runs
// valkey-server; the root is read-only and is not this machine's /usr. A tag the table does not
// list waits with ErrImagePull naming the table and its tags; pullPolicy Never of a built image
// runs. The Events are the kubelet's (Pulled).
func TestImagesAreTheirOwnRoots(t *testing.T) {
	t.Parallel()
	c := framework.Setup(t)
	ctx := context.Background()
	ns := c.RealNamespace(t, "nodes-images")
	script := `. /etc/os-release; echo "os=$VERSION_CODENAME"; for s in redis-server valkey-server; do command -v $s >/dev/null && $s --version | head -1; done; ` +
		`if command -v python3 >/dev/null; then echo has-python3; fi; echo data > /probe 2>/dev/null && echo ROOT-WRITABLE || echo ROOT-READONLY; sleep 3600`
	for _, tc := range []struct {
		name, image     string
		policy          corev1.PullPolicy
		os, server, tag string // tag: in the imageID
	}{
		{"redis-80", "redis:8.0", corev1.PullIfNotPresent, "os=trixie", "Redis server v=8.0.", "redis-server=5:8.0."},
		{"redis-72", "redis:7.2", corev1.PullNever, "os=bookworm", "Redis server v=7.0.", "redis-server=5:7.0."},
		{"valkey-81", "valkey/valkey:8.1", corev1.PullAlways, "os=trixie", "Valkey server v=8.1.", "valkey-server=8.1."},
	} {
		p := shellPod(tc.name, script)
		p.Spec.Containers[0].Image = tc.image
		p.Spec.Containers[0].ImagePullPolicy = tc.policy
		create(t, c, ns, p)
		out := waitLog(t, c, ns, tc.name, "ROOT-")
		for _, want := range []string{tc.os, tc.server, "ROOT-READONLY"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s (%s): output lacks %q:\n%s", tc.name, tc.image, want, out)
			}
		}
		if strings.Contains(out, "has-python3") {
			t.Errorf("%s (%s): python3 is there: the container sees this machine's /usr, not its image's:\n%s", tc.name, tc.image, out)
		}
		got := waitRunning(t, c, ns, tc.name)
		if id := got.Status.ContainerStatuses[0].ImageID; !strings.Contains(id, tc.tag) || !strings.Contains(id, "@sha256:") {
			t.Errorf("%s: imageID %q, want it to name %q and the root's digest", tc.name, id, tc.tag)
		}
		t.Logf("%s: imageID %s; %s", tc.image, got.Status.ContainerStatuses[0].ImageID, strings.ReplaceAll(strings.TrimSpace(out), "\n", "; "))
	}
	// The Events of the pulls, as kubectl describe shows them.
	framework.Eventually(t, 30*time.Second, "Pulled Events of the three pods", func() (bool, string, error) {
		evs, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("reason", "Pulled").String()})
		if err != nil {
			return false, "", err
		}
		var msgs []string
		present, pulled := 0, 0
		for _, e := range evs.Items {
			msgs = append(msgs, e.InvolvedObject.Name+": "+e.Message)
			if strings.Contains(e.Message, "already present on machine") {
				present++
			}
			if strings.Contains(e.Message, "Successfully pulled image \"valkey/valkey:8.1\"") && strings.Contains(e.Message, "Runs valkey-server 8.1.") {
				pulled++
			}
		}
		return present >= 2 && pulled >= 1, strings.Join(msgs, "\n"), nil
	})

	bad := shellPod("redis-74", "true")
	bad.Spec.Containers[0].Image = "redis:7.4"
	create(t, c, ns, bad)
	if msg := waitImagePullError(t, c, ns, "redis-74"); !strings.Contains(msg, `has repository "redis" with tags 7.0, 7.2, 8.0, not "7.4"`) {
		t.Errorf("ErrImagePull message of redis:7.4: %q", msg)
	}
}
