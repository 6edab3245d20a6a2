package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// refreshInterval is how often Secret, ConfigMap, projected and downward API volumes are rewritten
// from the informer caches (the kubelet's sync period is about a minute; a short one suits tests).
const refreshInterval = 3 * time.Second

func volumeSupported(v *corev1.Volume) bool {
	s := v.VolumeSource
	return s.EmptyDir != nil || s.PersistentVolumeClaim != nil || s.Secret != nil || s.ConfigMap != nil ||
		s.Projected != nil || s.DownwardAPI != nil
}

// volumeSet holds the host folders behind a pod's volumes.
type volumeSet struct {
	r     *podRuntime
	mu    sync.Mutex
	paths map[string]string // volume name -> host folder
	ro    map[string]bool   // volumes that are read-only by nature (PVC readOnly)
	// tokens caches service account tokens per projected source: key -> token and expiry.
	tokens map[string]tokenEntry
}

type tokenEntry struct {
	token   string
	refresh time.Time
}

func newVolumeSet(r *podRuntime) *volumeSet {
	return &volumeSet{r: r, paths: map[string]string{}, ro: map[string]bool{}, tokens: map[string]tokenEntry{}}
}

func (vs *volumeSet) dir(name string) string { return filepath.Join(vs.r.dir, "volumes", name) }

// fsGroup returns the pod's fsGroup, if any.
func (vs *volumeSet) fsGroup() *int64 {
	if sc := vs.r.pod.Spec.SecurityContext; sc != nil {
		return sc.FSGroup
	}
	return nil
}

// setup prepares every volume; it is repeated until it succeeds (a missing Secret, a claim not
// yet bound), so each step must be idempotent.
func (vs *volumeSet) setup(ctx context.Context) error {
	for i := range vs.r.pod.Spec.Volumes {
		v := &vs.r.pod.Spec.Volumes[i]
		if _, done := vs.paths[v.Name]; done {
			continue
		}
		var err error
		switch {
		case v.EmptyDir != nil:
			err = vs.setupEmptyDir(v)
		case v.PersistentVolumeClaim != nil:
			err = vs.setupPVC(ctx, v)
		default:
			err = vs.writeFiles(ctx, v)
		}
		if err != nil {
			return fmt.Errorf("MountVolume.SetUp failed for volume %q: %w", v.Name, err)
		}
	}
	return nil
}

func (vs *volumeSet) setupEmptyDir(v *corev1.Volume) error {
	dir := vs.dir(v.Name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if v.EmptyDir.Medium == corev1.StorageMediumMemory {
		size := resource.MustParse("64Mi")
		if v.EmptyDir.SizeLimit != nil && !v.EmptyDir.SizeLimit.IsZero() {
			size = *v.EmptyDir.SizeLimit
		} else if vs.r.cfg.Node != nil {
			if m, ok := vs.r.cfg.Node.Status.Allocatable[corev1.ResourceMemory]; ok {
				size = m
			}
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0777", size.Value())); err != nil {
			return fmt.Errorf("mounting tmpfs: %w", err)
		}
	} else if v.EmptyDir.Medium != corev1.StorageMediumDefault {
		return fmt.Errorf("emptyDir medium %q is not supported", v.EmptyDir.Medium)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	if g := vs.fsGroup(); g != nil {
		if err := setOwnership(dir, *g); err != nil {
			return err
		}
	}
	vs.paths[v.Name] = dir
	return nil
}

// setupPVC binds the claim's PersistentVolume folder (a hostPath or local volume on this machine).
func (vs *volumeSet) setupPVC(ctx context.Context, v *corev1.Volume) error {
	ns := vs.r.pod.Namespace
	pvc, err := vs.r.cfg.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, v.PersistentVolumeClaim.ClaimName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
		return fmt.Errorf("PersistentVolumeClaim %s/%s is not bound yet", ns, pvc.Name)
	}
	pv, err := vs.r.cfg.Client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var path string
	switch {
	case pv.Spec.HostPath != nil:
		path = pv.Spec.HostPath.Path
	case pv.Spec.Local != nil:
		path = pv.Spec.Local.Path
	default:
		return fmt.Errorf("PersistentVolume %s is neither hostPath nor local: this node cannot mount it", pv.Name)
	}
	owned, err := underRoot(vs.r.cfg.VolumeRoot, path)
	if err != nil {
		return fmt.Errorf("PersistentVolume %s: %w", pv.Name, err)
	}
	if owned {
		// The provisioner's folder: made here if it is not yet, and given to the pod's fsGroup
		// as the kubelet does.
		if err := os.MkdirAll(path, 0o700); err != nil {
			return err
		}
		if g := vs.fsGroup(); g != nil {
			if err := setOwnership(path, *g); err != nil {
				return err
			}
		}
	} else if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		// Any other host path is mounted as it is, never created, chowned or chmodded: a
		// PersistentVolume may name any folder of this machine.
		return fmt.Errorf("PersistentVolume %s names %s, outside the provisioner's folder, which is not an existing folder; this node creates none outside it", pv.Name, path)
	}
	vs.paths[v.Name] = path
	vs.ro[v.Name] = v.PersistentVolumeClaim.ReadOnly
	return nil
}

// underRoot reports whether path is inside root once both are resolved (symbolic links
// followed, as far as they exist), so that neither "..", nor a link in the path, leads out of
// it. An empty root holds nothing.
func underRoot(root, path string) (bool, error) {
	if root == "" || !filepath.IsAbs(path) {
		return false, nil
	}
	r, err := filepath.EvalSymlinks(root)
	if err != nil {
		return false, fmt.Errorf("the provisioner's folder %s: %w", root, err)
	}
	p := filepath.Clean(path)
	// Resolve the longest part of path that exists; the rest is made below it.
	rest := ""
	for {
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = filepath.Join(resolved, rest)
			break
		}
		parent := filepath.Dir(p)
		if parent == p {
			break
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
	rel, err := filepath.Rel(r, p)
	if err != nil {
		return false, nil
	}
	return rel != "." && rel != ".." && !strings.HasPrefix(rel, "../"), nil
}

// setOwnership gives a volume to the pod's fsGroup as the kubelet does: group-owned, group
// read-write, set-gid folders.
func setOwnership(root string, gid int64) error {
	return filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return nil
		}
		if err := os.Lchown(p, -1, int(gid)); err != nil {
			return err
		}
		mode := info.Mode().Perm() | 0o060
		if info.IsDir() {
			mode |= 0o070 | os.ModeSetgid
		}
		return os.Chmod(p, mode|(info.Mode()&os.ModeSticky))
	})
}

// file is one file of a Secret, ConfigMap, projected or downward API volume.
type file struct {
	data []byte
	mode os.FileMode
}

// writeFiles computes the content of a file-backed volume and writes it atomically.
func (vs *volumeSet) writeFiles(ctx context.Context, v *corev1.Volume) error {
	files, err := vs.payload(ctx, v)
	if err != nil {
		return err
	}
	dir := vs.dir(v.Name)
	if err := atomicWrite(dir, files, vs.fsGroup()); err != nil {
		return err
	}
	vs.mu.Lock()
	vs.paths[v.Name] = dir
	vs.mu.Unlock()
	return nil
}

func modeOr(m *int32, def int32) os.FileMode {
	if m != nil {
		return os.FileMode(*m)
	}
	return os.FileMode(def)
}

func (vs *volumeSet) payload(ctx context.Context, v *corev1.Volume) (map[string]file, error) {
	ns := vs.r.pod.Namespace
	out := map[string]file{}
	switch {
	case v.Secret != nil:
		s := v.Secret
		optional := s.Optional != nil && *s.Optional
		obj, err := vs.r.cfg.Secrets.Secrets(ns).Get(s.SecretName)
		if err != nil {
			if optional {
				return out, nil
			}
			return nil, fmt.Errorf("secret %q not found", s.SecretName)
		}
		return project(obj.Data, s.Items, modeOr(s.DefaultMode, corev1.SecretVolumeSourceDefaultMode), optional, "Secret "+s.SecretName)
	case v.ConfigMap != nil:
		c := v.ConfigMap
		optional := c.Optional != nil && *c.Optional
		obj, err := vs.r.cfg.ConfigMaps.ConfigMaps(ns).Get(c.Name)
		if err != nil {
			if optional {
				return out, nil
			}
			return nil, fmt.Errorf("configmap %q not found", c.Name)
		}
		return project(configMapData(obj), c.Items, modeOr(c.DefaultMode, corev1.ConfigMapVolumeSourceDefaultMode), optional, "ConfigMap "+c.Name)
	case v.DownwardAPI != nil:
		return vs.downward(v.DownwardAPI.Items, modeOr(v.DownwardAPI.DefaultMode, corev1.DownwardAPIVolumeSourceDefaultMode))
	case v.Projected != nil:
		def := modeOr(v.Projected.DefaultMode, corev1.ProjectedVolumeSourceDefaultMode)
		for i, src := range v.Projected.Sources {
			var part map[string]file
			var err error
			switch {
			case src.Secret != nil:
				optional := src.Secret.Optional != nil && *src.Secret.Optional
				obj, gerr := vs.r.cfg.Secrets.Secrets(ns).Get(src.Secret.Name)
				if gerr != nil {
					if optional {
						continue
					}
					return nil, fmt.Errorf("secret %q not found", src.Secret.Name)
				}
				part, err = project(obj.Data, src.Secret.Items, def, optional, "Secret "+src.Secret.Name)
			case src.ConfigMap != nil:
				optional := src.ConfigMap.Optional != nil && *src.ConfigMap.Optional
				obj, gerr := vs.r.cfg.ConfigMaps.ConfigMaps(ns).Get(src.ConfigMap.Name)
				if gerr != nil {
					if optional {
						continue
					}
					return nil, fmt.Errorf("configmap %q not found", src.ConfigMap.Name)
				}
				part, err = project(configMapData(obj), src.ConfigMap.Items, def, optional, "ConfigMap "+src.ConfigMap.Name)
			case src.DownwardAPI != nil:
				part, err = vs.downward(src.DownwardAPI.Items, def)
			case src.ServiceAccountToken != nil:
				var tok string
				tok, err = vs.token(ctx, i, src.ServiceAccountToken)
				part = map[string]file{src.ServiceAccountToken.Path: {data: []byte(tok), mode: def}}
			default:
				err = fmt.Errorf("projected source %d: only secret, configMap, downwardAPI and serviceAccountToken are supported", i)
			}
			if err != nil {
				return nil, err
			}
			for k, f := range part {
				out[k] = f
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported volume")
}

func configMapData(cm *corev1.ConfigMap) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range cm.Data {
		out[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		out[k] = v
	}
	return out
}

// project selects keys (all, or items with their paths and modes).
func project(data map[string][]byte, items []corev1.KeyToPath, def os.FileMode, optional bool, what string) (map[string]file, error) {
	out := map[string]file{}
	if len(items) == 0 {
		for k, v := range data {
			out[k] = file{data: v, mode: def}
		}
		return out, nil
	}
	for _, it := range items {
		v, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q", what, it.Key)
		}
		out[it.Path] = file{data: v, mode: modeOr(it.Mode, int32(def))}
	}
	return out, nil
}

func (vs *volumeSet) downward(items []corev1.DownwardAPIVolumeFile, def os.FileMode) (map[string]file, error) {
	vs.r.mu.Lock()
	pod := vs.r.pod.DeepCopy()
	if vs.r.podIP != nil {
		pod.Status.PodIP = vs.r.podIP.String()
		pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	pod.Status.HostIP = nodeInternalIP(vs.r.cfg.Node)
	vs.r.mu.Unlock()
	out := map[string]file{}
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.FieldRef != nil:
			v, err = fieldValue(pod, it.FieldRef.FieldPath)
		case it.ResourceFieldRef != nil:
			c := &pod.Spec.Containers[0]
			v, err = vs.r.resourceValue(pod, c, it.ResourceFieldRef)
		}
		if err != nil {
			return nil, fmt.Errorf("downward API %s: %w", it.Path, err)
		}
		out[it.Path] = file{data: []byte(v), mode: modeOr(it.Mode, int32(def))}
	}
	return out, nil
}

// token returns a bound service account token for the pod, requested again when 80 % of its
// lifetime has passed (as the kubelet's token manager does).
func (vs *volumeSet) token(ctx context.Context, idx int, src *corev1.ServiceAccountTokenProjection) (string, error) {
	k := fmt.Sprintf("%d/%s", idx, src.Audience)
	vs.mu.Lock()
	e, ok := vs.tokens[k]
	vs.mu.Unlock()
	if ok && time.Now().Before(e.refresh) {
		return e.token, nil
	}
	exp := int64(3600)
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	sa := vs.r.pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := vs.r.cfg.Client.CoreV1().ServiceAccounts(vs.r.pod.Namespace).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{
			Audiences:         aud,
			ExpirationSeconds: &exp,
			BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: vs.r.pod.Name, UID: vs.r.pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", vs.r.pod.Namespace, sa, err)
	}
	life := time.Until(tr.Status.ExpirationTimestamp.Time)
	e = tokenEntry{token: tr.Status.Token, refresh: time.Now().Add(life * 8 / 10)}
	vs.mu.Lock()
	vs.tokens[k] = e
	vs.mu.Unlock()
	return e.token, nil
}

// refreshLoop rewrites file-backed volumes whose source changed, until ctx ends.
func (vs *volumeSet) refreshLoop(ctx context.Context) {
	t := time.NewTicker(refreshInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for i := range vs.r.pod.Spec.Volumes {
			v := &vs.r.pod.Spec.Volumes[i]
			if v.EmptyDir != nil || v.PersistentVolumeClaim != nil {
				continue
			}
			if err := vs.writeFiles(ctx, v); err != nil && ctx.Err() == nil {
				klog.V(2).InfoS("Refreshing a volume failed", "pod", klog.KObj(vs.r.pod), "volume", v.Name, "err", err.Error())
			}
		}
	}
}

// teardown unmounts memory-backed emptyDirs (the folders go with the pod's folder).
func (vs *volumeSet) teardown() {
	unmountUnder(filepath.Join(vs.r.dir, "volumes"))
}

// mountsFor resolves a container's volumeMounts to host paths.
func (vs *volumeSet) mountsFor(c *corev1.Container) ([]mountSpec, error) {
	var out []mountSpec
	for _, m := range c.VolumeMounts {
		vs.mu.Lock()
		src, ok := vs.paths[m.Name]
		ro := vs.ro[m.Name]
		vs.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("volumeMount %q: no volume of that name is set up", m.Name)
		}
		if m.SubPath != "" {
			clean := filepath.Clean("/" + m.SubPath)
			if clean == "/" || strings.Contains(m.SubPath, "..") {
				return nil, fmt.Errorf("volumeMount %q: subPath %q must be a relative path inside the volume", m.Name, m.SubPath)
			}
			src = filepath.Join(src, clean)
			if _, err := os.Lstat(src); os.IsNotExist(err) {
				if err := os.MkdirAll(src, 0o777); err != nil {
					return nil, err
				}
			}
		}
		out = append(out, mountSpec{source: src, destination: m.MountPath, readOnly: m.ReadOnly || ro})
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].destination) < len(out[j].destination) })
	return out, nil
}

// atomicWrite writes files into dir as the kubelet's AtomicWriter does: the content goes to a new
// timestamped folder, the "..data" link is swapped to it in one rename, and each top-level name
// links through "..data". Nothing is written when the content did not change.
func atomicWrite(dir string, files map[string]file, fsGroup *int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	dataLink := filepath.Join(dir, "..data")
	if old, err := os.Readlink(dataLink); err == nil && sameContent(filepath.Join(dir, old), files) {
		return nil
	}
	ts := "..data_" + time.Now().UTC().Format("2006_01_02_15_04_05.000000000")
	tsDir := filepath.Join(dir, ts)
	if err := os.MkdirAll(tsDir, 0o755); err != nil {
		return err
	}
	for p, f := range files {
		full := filepath.Join(tsDir, filepath.Clean("/"+p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		mode := f.mode
		if fsGroup != nil {
			mode |= 0o040
		}
		if err := os.WriteFile(full, f.data, mode); err != nil {
			return err
		}
		if err := os.Chmod(full, mode); err != nil {
			return err
		}
		if fsGroup != nil {
			if err := os.Chown(full, -1, int(*fsGroup)); err != nil {
				return err
			}
		}
	}
	old, _ := os.Readlink(dataLink)
	tmpLink := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmpLink)
	if err := os.Symlink(ts, tmpLink); err != nil {
		return err
	}
	if err := os.Rename(tmpLink, dataLink); err != nil {
		return err
	}
	want := map[string]bool{}
	for p := range files {
		top := strings.SplitN(strings.TrimPrefix(filepath.Clean("/"+p), "/"), "/", 2)[0]
		want[top] = true
		link := filepath.Join(dir, top)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", top), link); err != nil {
				return err
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, "..") {
			continue
		}
		if !want[n] {
			_ = os.Remove(filepath.Join(dir, n))
		}
	}
	if old != "" && old != ts {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}

func sameContent(dir string, files map[string]file) bool {
	count := 0
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		f, ok := files[rel]
		if !ok {
			return fmt.Errorf("extra")
		}
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(data, f.data) {
			return fmt.Errorf("differs")
		}
		count++
		return nil
	})
	return err == nil && count == len(files)
}
