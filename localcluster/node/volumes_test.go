package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestUnderRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "pvc-a"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link-out")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]bool{
		filepath.Join(root, "pvc-a"):             true,
		filepath.Join(root, "pvc-new", "deeper"): true, // not yet made: made under root
		root:                                     false,
		filepath.Join(root, "..", filepath.Base(outside)): false,
		filepath.Join(root, "link-out"):                   false, // a link leading out
		filepath.Join(root, "link-out", "x"):              false,
		outside:                                           false,
		"/etc":                                            false,
		"relative/path":                                   false,
	} {
		got, err := underRoot(root, path)
		if err != nil || got != want {
			t.Errorf("underRoot(%s): %v %v, want %v", path, got, err, want)
		}
	}
	if got, _ := underRoot("", filepath.Join(root, "pvc-a")); got {
		t.Error("an empty root holds something")
	}
}

// A PersistentVolume under the provisioner's folder is made and given to the pod's fsGroup; one
// naming any other folder is mounted as it is (its owner, group and modes untouched), and one
// naming a folder that does not exist outside the root is refused, not created.
func TestPersistentVolumeOwnershipOnlyUnderTheProvisionersRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to change a folder's group (CI runs as root)")
	}
	root, foreign := t.TempDir(), t.TempDir()
	secret := filepath.Join(foreign, "secret.key")
	if err := os.WriteFile(secret, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(foreign, 0o700); err != nil {
		t.Fatal(err)
	}
	pv := func(name, path string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}}}}
	}
	pvc := func(name, volume string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	}
	client := fake.NewClientset(
		pv("ours", filepath.Join(root, "pvc-1")), pvc("ours", "ours"),
		pv("host", foreign), pvc("host", "host"),
		pv("missing", filepath.Join(foreign, "not-there")), pvc("missing", "missing"),
		pv("escape", filepath.Join(root, "..", filepath.Base(foreign))), pvc("escape", "escape"),
	)
	gid := int64(4242)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"},
		Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{FSGroup: &gid}}}
	vs := newVolumeSet(&podRuntime{cfg: Config{Client: client, VolumeRoot: root}, pod: pod, dir: t.TempDir()})
	claim := func(name string) *corev1.Volume {
		return &corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
	}
	ctx := context.Background()
	if err := vs.setupPVC(ctx, claim("ours")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root, "pvc-1")); err != nil || fi.Sys().(*syscall.Stat_t).Gid != uint32(gid) || fi.Mode()&os.ModeSetgid == 0 {
		t.Errorf("the provisioner's folder was not given to the fsGroup: %v %v", fi, err)
	}
	for _, name := range []string{"host", "escape"} {
		if err := vs.setupPVC(ctx, claim(name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, p := range []string{foreign, secret} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); st.Gid != 0 || fi.Mode().Perm()&0o070 != 0 || fi.Mode()&os.ModeSetgid != 0 {
			t.Errorf("%s changed: group %d, mode %v", p, st.Gid, fi.Mode())
		}
	}
	if err := vs.setupPVC(ctx, claim("missing")); err == nil {
		t.Error("a missing folder outside the root was accepted")
	}
	if _, err := os.Stat(filepath.Join(foreign, "not-there")); !os.IsNotExist(err) {
		t.Errorf("a folder outside the root was created: %v", err)
	}
}
