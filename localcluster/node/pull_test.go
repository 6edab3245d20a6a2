package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"example.com/cache-operator/localcluster/node/images"
)

// fakeMmdebstrap is a stand-in for mmdebstrap: it writes a root with a dpkg status naming the
// packages at version 5:8.0.2-3 into its target (the argument before the mirror), or fails while
// the file fail exists. Each run appends a line to runs.
func fakeMmdebstrap(t *testing.T, dir string) (bin, fail, runs string) {
	t.Helper()
	bin, fail, runs = filepath.Join(dir, "mmdebstrap"), filepath.Join(dir, "fail"), filepath.Join(dir, "runs")
	script := fmt.Sprintf(`#!/bin/sh
echo run >> %[2]s
if [ -e %[1]s ]; then echo "E: the mirror is down" >&2; exit 1; fi
target=$(echo "$@" | awk '{print $(NF-1)}')
echo "I: installing essential packages..." >&2
mkdir -p "$target/usr/bin" "$target/etc" "$target/var/lib/dpkg"
printf 'Package: redis-server\nStatus: install ok installed\nVersion: 5:8.0.2-3\n\n' > "$target/var/lib/dpkg/status"
`, fail, runs)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, fail, runs
}

func drain(rec *record.FakeRecorder) []string {
	var out []string
	for len(rec.Events) > 0 {
		out = append(out, <-rec.Events)
	}
	return out
}

// A pull as the kubelet reports it: a root that fails to build gives Failed, ErrImagePull, then
// ImagePullBackOff, and is built once the mirror answers (Pulling, Pulled with the size and the
// version that runs); IfNotPresent then finds it, Always "pulls" again without building, Never
// refuses an image that is not built.
func TestPullBuildsTheRootOnceAndReportsIt(t *testing.T) {
	dir := t.TempDir()
	bin, fail, runs := fakeMmdebstrap(t, dir)
	table := &images.Table{Path: "images.yaml",
		Roots: map[string]images.Recipe{"trixie-redis": {Suite: "trixie", Packages: []string{"redis-server"}}, "other": {Suite: "bookworm", Packages: []string{"x"}}},
		Images: []images.Image{
			{Repository: "redis", Tags: []string{"8.0"}, Root: "trixie-redis", VersionPackage: "redis-server", Note: "a note"},
			{Repository: "other", Root: "other"},
		}}
	rec := record.NewFakeRecorder(100)
	p := &Provider{recorder: rec, cfg: Config{Images: table, MaxBackoff: 20 * time.Millisecond,
		Roots: &images.Store{Dir: filepath.Join(dir, "store"), Mmdebstrap: bin}}}
	newPod := func(uid, image string, policy corev1.PullPolicy) (*podRuntime, *containerState) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: k8stypes.UID("u-" + uid)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image, ImagePullPolicy: policy}}}}
		r := newPodRuntime(p, pod)
		return r, r.containers[0]
	}
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r, c := newPod("1", "redis:8.0", corev1.PullIfNotPresent)
	image, err := table.Lookup("redis:8.0")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		root *images.Root
		ok   bool
	}
	done := make(chan result, 1)
	go func() { root, ok := r.pull(c, image); done <- result{root, ok} }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		w := c.state.Waiting
		r.mu.Unlock()
		if w != nil && w.Reason == "ImagePullBackOff" && strings.Contains(w.Message, "the mirror is down") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ImagePullBackOff with the build's error within 10s; state %+v", w)
		}
		time.Sleep(5 * time.Millisecond) // polling the state, with a deadline
	}
	_ = os.Remove(fail)
	var got result
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull did not finish within 10s of the mirror answering")
	}
	if !got.ok || got.root == nil || got.root.Versions["redis-server"] != "5:8.0.2-3" {
		t.Fatalf("pull: %+v", got)
	}
	events := strings.Join(drain(rec), "\n")
	for _, want := range []string{
		`Normal Pulling Pulling image "redis:8.0"`,
		`Warning Failed Failed to pull image "redis:8.0": building root trixie-redis: mmdebstrap: exit status 1`,
		`Warning Failed Error: ErrImagePull`,
		`Normal BackOff Back-off pulling image "redis:8.0"`,
		`Normal Pulled Successfully pulled image "redis:8.0" in `,
		`Runs redis-server 8.0.2 (Debian trixie 5:8.0.2-3). a note.`,
	} {
		if !strings.Contains(events, want) {
			t.Errorf("events lack %q:\n%s", want, events)
		}
	}
	if id := imageID(image, got.root); !strings.HasPrefix(id, "rootfs://trixie-redis/redis-server=5:8.0.2-3@sha256:") {
		t.Errorf("imageID %q", id)
	}
	builds := func() int {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "run")
	}
	before := builds()

	// Present: IfNotPresent finds it, Always reports a pull, neither builds.
	r2, c2 := newPod("2", "redis:8.0", corev1.PullIfNotPresent)
	if root, ok := r2.pull(c2, image); !ok || root == nil {
		t.Fatal("second pull failed")
	}
	r3, c3 := newPod("3", "redis:8.0", corev1.PullAlways)
	if root, ok := r3.pull(c3, image); !ok || root == nil {
		t.Fatal("pull Always failed")
	}
	events = strings.Join(drain(rec), "\n")
	if !strings.Contains(events, `Normal Pulled Container image "redis:8.0" already present on machine`) ||
		strings.Count(events, "Pulling image") != 1 || !strings.Contains(events, "Successfully pulled") {
		t.Errorf("events of IfNotPresent then Always:\n%s", events)
	}
	if after := builds(); after != before {
		t.Errorf("mmdebstrap ran %d more times for a root that is built", after-before)
	}

	// Never, not built: ErrImageNeverPull until the pod stops.
	other, _ := table.Lookup("other:1")
	r4, c4 := newPod("4", "other:1", corev1.PullNever)
	done4 := make(chan bool, 1)
	go func() { _, ok := r4.pull(c4, other); done4 <- ok }()
	deadline = time.Now().Add(10 * time.Second)
	for {
		r4.mu.Lock()
		w := c4.state.Waiting
		r4.mu.Unlock()
		if w != nil && w.Reason == "ErrImageNeverPull" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ErrImageNeverPull within 10s; state %+v", w)
		}
		time.Sleep(5 * time.Millisecond) // polling the state, with a deadline
	}
	r4.kill()
	if ok := <-done4; ok {
		t.Error("a pull of a stopped pod reported ok")
	}
	if after := builds(); after != before {
		t.Errorf("pull policy Never built a root")
	}
}
