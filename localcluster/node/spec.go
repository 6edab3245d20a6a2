package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	seccomp "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	corev1 "k8s.io/api/core/v1"

	"example.com/cache-operator/localcluster/node/images"
)

// defaultCapabilities is the set a container runtime grants when the pod asks for nothing
// (containerd's and CRI-O's default).
var defaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// hostEtc is where the image's /etc (its built root's, or this machine's for the host root) is
// bound, read-only, in every container. The container's own /etc is a folder of the bundle
// holding a link to each entry there, so that volumes can be mounted under /etc (as an image's
// writable /etc allows) and the pod's hosts, resolv.conf and hostname replace the image's.
const hostEtc = "/.host-etc"

// rootLinks are the merged-/usr symlinks of a Debian root.
var rootLinks = map[string]string{"bin": "usr/bin", "sbin": "usr/sbin", "lib": "usr/lib", "lib64": "usr/lib64"}

// identity is the resolved user of a container.
type identity struct {
	uid, gid uint32
	groups   []uint32
}

// resolveIdentity applies the pod's and the container's securityContext: runAsUser, runAsGroup,
// supplementalGroups and fsGroup, and refuses runAsNonRoot with user 0.
func resolveIdentity(pod *corev1.Pod, c *corev1.Container) (identity, error) {
	var id identity
	psc := pod.Spec.SecurityContext
	csc := c.SecurityContext
	if psc != nil && psc.RunAsUser != nil {
		id.uid = uint32(*psc.RunAsUser)
	}
	if csc != nil && csc.RunAsUser != nil {
		id.uid = uint32(*csc.RunAsUser)
	}
	if psc != nil && psc.RunAsGroup != nil {
		id.gid = uint32(*psc.RunAsGroup)
	}
	if csc != nil && csc.RunAsGroup != nil {
		id.gid = uint32(*csc.RunAsGroup)
	}
	nonRoot := psc != nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
	if csc != nil && csc.RunAsNonRoot != nil {
		nonRoot = *csc.RunAsNonRoot
	}
	if nonRoot && id.uid == 0 {
		return id, fmt.Errorf("container has runAsNonRoot and image will run as root (pod: %q, container: %s)", pod.Namespace+"/"+pod.Name, c.Name)
	}
	if psc != nil {
		for _, g := range psc.SupplementalGroups {
			id.groups = append(id.groups, uint32(g))
		}
		if psc.FSGroup != nil {
			id.groups = append(id.groups, uint32(*psc.FSGroup))
		}
	}
	return id, nil
}

// capabilities returns the container's capability set: the default set, minus drop, plus add.
func capabilities(c *corev1.Container) []string {
	set := map[string]bool{}
	for _, cp := range defaultCapabilities {
		set[cp] = true
	}
	if sc := c.SecurityContext; sc != nil && sc.Capabilities != nil {
		for _, d := range sc.Capabilities.Drop {
			if strings.EqualFold(string(d), "ALL") {
				set = map[string]bool{}
				continue
			}
			delete(set, capName(d))
		}
		for _, a := range sc.Capabilities.Add {
			set[capName(a)] = true
		}
	}
	out := make([]string, 0, len(set))
	for _, cp := range defaultCapabilities {
		if set[cp] {
			out = append(out, cp)
			delete(set, cp)
		}
	}
	for cp := range set {
		out = append(out, cp)
	}
	return out
}

func capName(c corev1.Capability) string {
	s := strings.ToUpper(string(c))
	if !strings.HasPrefix(s, "CAP_") {
		s = "CAP_" + s
	}
	return s
}

// mountSpec is one volume mount of a container, resolved to a host path.
type mountSpec struct {
	source, destination string
	readOnly            bool
}

// bundleInput is everything buildSpec needs for one container attempt.
type bundleInput struct {
	pod        *corev1.Pod
	container  *corev1.Container
	image      *images.Image
	root       *images.Root // the image's built root; nil for the scratch and host roots
	args       []string
	env        []string
	hostname   string
	netns      string // path of the pod's network namespace
	etcFiles   map[string]string
	mounts     []mountSpec
	cgroupPath string
}

// buildSpec writes the OCI bundle of one container attempt (config.json and an empty root with
// mount points) into dir. The image's root is bound into it read-only: its /usr (and so, through
// the merged-/usr links, /bin and /lib) and its /etc.
func buildSpec(dir string, in bundleInput) (*specs.Spec, error) {
	c := in.container
	id, err := resolveIdentity(in.pod, c)
	if err != nil {
		return nil, err
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr", "etc", "proc", "dev", "sys", "tmp", "var", "run", "data", "home", "root", "opt", "srv", "mnt"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	for name, target := range rootLinks {
		if err := os.Symlink(target, filepath.Join(rootfs, name)); err != nil && !os.IsExist(err) {
			return nil, err
		}
	}
	// The image's /usr and /etc: its built root's, this machine's (host), or none (scratch).
	usrSource, etcSource := "", ""
	switch {
	case in.root != nil:
		usrSource, etcSource = filepath.Join(in.root.Path, "usr"), filepath.Join(in.root.Path, "etc")
	case in.image.Root == images.Host:
		usrSource, etcSource = "/usr", "/etc"
	}
	if err := populateEtc(filepath.Join(rootfs, "etc"), etcSource, in.mounts); err != nil {
		return nil, err
	}
	readOnlyRoot := c.SecurityContext != nil && c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
	noNewPrivs := c.SecurityContext != nil && c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation
	caps := capabilities(c)
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = in.image.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}

	s := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: "rootfs", Readonly: readOnlyRoot},
		Hostname: in.hostname,
		Process: &specs.Process{
			Args: in.args,
			Env:  in.env,
			Cwd:  cwd,
			User: specs.User{UID: id.uid, GID: id.gid, AdditionalGids: id.groups},
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			NoNewPrivileges: noNewPrivs,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: in.cgroupPath,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: in.netns},
			},
			MaskedPaths: []string{
				"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi",
			},
			ReadonlyPaths: []string{
				"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
			},
			Resources: resources(c),
		},
	}
	if usrSource != "" {
		s.Mounts = append(s.Mounts,
			specs.Mount{Destination: "/usr", Type: "bind", Source: usrSource, Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			specs.Mount{Destination: hostEtc, Type: "bind", Source: etcSource, Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
	}
	// The image's programs: a folder over /usr/local/bin with one bound file per program.
	if len(in.image.Programs) > 0 {
		binDir := filepath.Join(dir, "image-bin")
		if err := os.MkdirAll(binDir, 0o755); err != nil {
			return nil, err
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/usr/local/bin", Type: "bind", Source: binDir, Options: []string{"rbind", "ro"}})
		for name, hostPath := range in.image.Programs {
			placeholder := filepath.Join(binDir, name)
			if err := os.WriteFile(placeholder, nil, 0o755); err != nil {
				return nil, err
			}
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/usr/local/bin/" + name, Type: "bind", Source: hostPath, Options: []string{"bind", "ro"}})
		}
	}
	for _, name := range []string{"hosts", "resolv.conf", "hostname"} {
		if src, ok := in.etcFiles[name]; ok {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc/" + name, Type: "bind", Source: src, Options: []string{"bind", "rw"}})
		}
	}
	for _, m := range in.mounts {
		opts := []string{"rbind", "rw"}
		if m.readOnly {
			opts = []string{"rbind", "ro"}
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.destination, Type: "bind", Source: m.source, Options: opts})
	}
	if err := applySeccomp(in.pod, c, s); err != nil {
		return nil, err
	}
	return s, nil
}

// populateEtc fills the container's /etc with links to the entries of the image's (src, bound at
// hostEtc; "": none), except the files the pod provides and the top-level folders that volumes
// are mounted into, which are real folders.
func populateEtc(etc, src string, mounts []mountSpec) error {
	own := map[string]bool{"hosts": true, "resolv.conf": true, "hostname": true}
	for _, m := range mounts {
		if rest, ok := strings.CutPrefix(filepath.Clean(m.destination), "/etc/"); ok {
			own[strings.SplitN(rest, "/", 2)[0]] = true
		}
	}
	var entries []os.DirEntry
	if src != "" {
		var err error
		if entries, err = os.ReadDir(src); err != nil {
			return err
		}
	}
	for _, e := range entries {
		if own[e.Name()] {
			continue
		}
		if err := os.Symlink(filepath.Join(hostEtc, e.Name()), filepath.Join(etc, e.Name())); err != nil && !os.IsExist(err) {
			return err
		}
	}
	for name := range own {
		if name == "hosts" || name == "resolv.conf" || name == "hostname" {
			if err := os.WriteFile(filepath.Join(etc, name), nil, 0o644); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Join(etc, name), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// applySeccomp sets the profile the pod asks for: RuntimeDefault is the Docker/Moby default
// profile, Unconfined (the Kubernetes default when nothing is set) is none.
func applySeccomp(pod *corev1.Pod, c *corev1.Container, s *specs.Spec) error {
	var profile *corev1.SeccompProfile
	if pod.Spec.SecurityContext != nil {
		profile = pod.Spec.SecurityContext.SeccompProfile
	}
	if c.SecurityContext != nil && c.SecurityContext.SeccompProfile != nil {
		profile = c.SecurityContext.SeccompProfile
	}
	if profile == nil || profile.Type == corev1.SeccompProfileTypeUnconfined {
		return nil
	}
	if profile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		return fmt.Errorf("seccomp profile type %q is not supported by the node agent (RuntimeDefault and Unconfined are)", profile.Type)
	}
	sp, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return fmt.Errorf("seccomp RuntimeDefault: %w", err)
	}
	s.Linux.Seccomp = sp
	return nil
}

// resources turns requests and limits into cgroup settings: memory limit, CPU quota from the limit
// and CPU shares from the request.
func resources(c *corev1.Container) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		v := q.Value()
		r.Memory = &specs.LinuxMemory{Limit: &v}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		period := uint64(100000)
		quota := q.MilliValue() * int64(period) / 1000
		if quota < 1000 {
			quota = 1000
		}
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		shares := uint64(q.MilliValue() * 1024 / 1000)
		if shares < 2 {
			shares = 2
		}
		if r.CPU == nil {
			r.CPU = &specs.LinuxCPU{}
		}
		r.CPU.Shares = &shares
	}
	return r
}
