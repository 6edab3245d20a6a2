package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	for in, want := range map[string]string{
		"$(A)-$(B)":  "1-two",
		"$$(A)":      "$(A)",
		"$(MISSING)": "$(MISSING)",
		"plain $ x":  "plain $ x",
		"tail $(A":   "tail $(A",
		"$(A)$(A)$$": "11$",
	} {
		if got := expand(in, vars); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIPAM(t *testing.T) {
	a, err := NewIPAM("198.18.1.0/30")
	if err != nil {
		t.Fatal(err)
	}
	ip1, err := a.Allocate("u1")
	if err != nil || ip1.String() != "198.18.1.1" {
		t.Fatalf("first address: %v %v", ip1, err)
	}
	ip2, err := a.Allocate("u2")
	if err != nil || ip2.String() != "198.18.1.2" {
		t.Fatalf("second address: %v %v", ip2, err)
	}
	if _, err := a.Allocate("u3"); err == nil {
		t.Fatal("a /30 has two host addresses; the third allocation must fail")
	}
	a.Release("u1")
	if ip, err := a.Allocate("u4"); err != nil || ip.String() != "198.18.1.1" {
		t.Fatalf("address after release: %v %v", ip, err)
	}
}

func TestCapabilitiesAndIdentity(t *testing.T) {
	c := &corev1.Container{Name: "c", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}
	if got := capabilities(c); len(got) != 0 {
		t.Errorf("drop ALL leaves %v", got)
	}
	c.SecurityContext.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
	if got := capabilities(c); len(got) != 1 || got[0] != "CAP_NET_BIND_SERVICE" {
		t.Errorf("drop ALL, add NET_BIND_SERVICE gives %v", got)
	}
	nonRoot := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n"}, Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &nonRoot}}}
	if _, err := resolveIdentity(pod, &corev1.Container{Name: "c"}); err == nil {
		t.Error("runAsNonRoot without runAsUser must be refused (the image user is root)")
	}
	uid, fs := int64(999), int64(1000)
	pod.Spec.SecurityContext.RunAsUser, pod.Spec.SecurityContext.FSGroup = &uid, &fs
	id, err := resolveIdentity(pod, &corev1.Container{Name: "c"})
	if err != nil || id.uid != 999 || id.gid != 0 || len(id.groups) != 1 || id.groups[0] != 1000 {
		t.Errorf("identity = %+v, %v", id, err)
	}
}

func TestAtomicWrite(t *testing.T) {
	dir := t.TempDir()
	write := func(files map[string]file) {
		t.Helper()
		if err := atomicWrite(dir, files, nil); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	write(map[string]file{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o600}})
	if read("a") != "1" || read("sub/b") != "2" {
		t.Fatalf("first write: a=%q sub/b=%q", read("a"), read("sub/b"))
	}
	link1, _ := os.Readlink(filepath.Join(dir, "..data"))
	write(map[string]file{"a": {data: []byte("1"), mode: 0o644}, "sub/b": {data: []byte("2"), mode: 0o600}})
	if link2, _ := os.Readlink(filepath.Join(dir, "..data")); link2 != link1 {
		t.Errorf("unchanged content was rewritten (..data %s -> %s)", link1, link2)
	}
	write(map[string]file{"a": {data: []byte("changed"), mode: 0o644}})
	if read("a") != "changed" {
		t.Errorf("update: a=%q", read("a"))
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub")); !os.IsNotExist(err) {
		t.Errorf("a key removed from the source is still in the volume (%v)", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 { // a, ..data, one timestamped folder
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("volume folder holds %v; want a, ..data and one data folder", names)
	}
}

func TestUnsupported(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "redis"}}}}
	if why := unsupported(pod); why != "" {
		t.Errorf("plain pod refused: %s", why)
	}
	pod.Spec.Volumes = []corev1.Volume{{Name: "h", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
	if why := unsupported(pod); !strings.Contains(why, `volume "h"`) {
		t.Errorf("hostPath volume: %q", why)
	}
	pod.Spec.Volumes = nil
	pod.Spec.HostNetwork = true
	if why := unsupported(pod); !strings.Contains(why, "hostNetwork") {
		t.Errorf("hostNetwork: %q", why)
	}
}
