package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// IPAM hands out the addresses of one node's pod range, lowest free first.
type IPAM struct {
	mu    sync.Mutex
	base  net.IP
	size  int
	inUse map[int]types.UID
}

// NewIPAM manages the host addresses of cidr (network and broadcast addresses excluded).
func NewIPAM(cidr string) (*IPAM, error) {
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("--pod-cidr: %w", err)
	}
	ones, bits := ipnet.Mask.Size()
	if bits != 32 || ones < 16 || ones > 30 {
		return nil, fmt.Errorf("--pod-cidr %s: want an IPv4 range between /16 and /30", cidr)
	}
	return &IPAM{base: ipnet.IP.To4(), size: 1 << (bits - ones), inUse: map[int]types.UID{}}, nil
}

// Allocate returns a free address for uid.
func (a *IPAM) Allocate(uid types.UID) (net.IP, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := 1; i < a.size-1; i++ {
		if _, used := a.inUse[i]; used {
			continue
		}
		a.inUse[i] = uid
		return a.nth(i), nil
	}
	return nil, fmt.Errorf("no free pod address in %s/%d", a.base, 32-bitsOf(a.size))
}

// Release frees uid's address.
func (a *IPAM) Release(uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, u := range a.inUse {
		if u == uid {
			delete(a.inUse, i)
		}
	}
}

func (a *IPAM) nth(i int) net.IP {
	ip := make(net.IP, 4)
	copy(ip, a.base)
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	v += uint32(i)
	return net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).To4()
}

func bitsOf(size int) int {
	n := 0
	for size > 1 {
		size >>= 1
		n++
	}
	return n
}

// podNetns is the name of a pod's network namespace (under /run/netns). It starts with the
// cluster's namespace name, so that cluster-down finds every pod namespace of its cluster.
func podNetns(cfg Config, uid types.UID) string { return cfg.ClusterNetns + "-p-" + string(uid) }

// HostVeth is the name of the bridge side of a pod's veth pair, in the cluster namespace: "v" and
// the first 12 hex digits of the pod's UID. Tests cut a pod's network by setting it down.
func HostVeth(uid types.UID) string {
	hex := strings.ReplaceAll(string(uid), "-", "")
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return "v" + hex
}

// ipCmd runs the ip (or bridge) command of iproute2 and returns its error with its output.
func ipCmd(ctx context.Context, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// SetupPodNetwork creates the pod's network namespace with eth0 on the cluster bridge, ip/prefix
// of the pod network, and a default route through the gateway. The namespace name is returned.
func SetupPodNetwork(ctx context.Context, cfg Config, uid types.UID, ip net.IP) (string, error) {
	ns := podNetns(cfg, uid)
	veth := HostVeth(uid)
	_, podNet, err := net.ParseCIDR(cfg.PodNetwork)
	if err != nil {
		return "", fmt.Errorf("--pod-network: %w", err)
	}
	prefix, _ := podNet.Mask.Size()
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", cfg.ClusterNetns, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"ip", "-n", cfg.ClusterNetns, "link", "set", veth, "master", cfg.Bridge, "up"},
		{"bridge", "-n", cfg.ClusterNetns, "link", "set", "dev", veth, "hairpin", "on"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "addr", "add", fmt.Sprintf("%s/%d", ip, prefix), "dev", "eth0"},
		{"ip", "-n", ns, "link", "set", "eth0", "up"},
		{"ip", "-n", ns, "route", "add", "default", "via", cfg.Gateway},
	}
	for _, s := range steps {
		if err := ipCmd(ctx, s[0], s[1:]...); err != nil {
			TeardownPodNetwork(cfg, uid)
			return "", err
		}
	}
	return ns, nil
}

// TeardownPodNetwork deletes the pod's namespace and veth pair. Missing parts are not an error.
func TeardownPodNetwork(cfg Config, uid types.UID) {
	ctx := context.Background()
	_ = ipCmd(ctx, "ip", "-n", cfg.ClusterNetns, "link", "del", HostVeth(uid))
	if _, err := os.Stat(filepath.Join("/run/netns", podNetns(cfg, uid))); err == nil {
		if err := ipCmd(ctx, "ip", "netns", "del", podNetns(cfg, uid)); err != nil {
			klog.ErrorS(err, "Deleting the pod network namespace", "uid", uid)
		}
	}
}

// CleanupNode removes what an earlier run of this node left: containers still running under its
// runc root, volume mounts and network namespaces of its pods, and their folders.
func CleanupNode(ctx context.Context, cfg Config) error {
	runcRoot := filepath.Join(cfg.StateDir, "runc")
	if entries, err := os.ReadDir(runcRoot); err == nil {
		for _, e := range entries {
			_ = exec.CommandContext(ctx, cfg.Runc, "--root", runcRoot, "kill", e.Name(), "KILL").Run()
			_ = exec.CommandContext(ctx, cfg.Runc, "--root", runcRoot, "delete", "--force", e.Name()).Run()
		}
	}
	podsDir := filepath.Join(cfg.StateDir, "pods")
	entries, err := os.ReadDir(podsDir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	for _, e := range entries {
		dir := filepath.Join(podsDir, e.Name())
		unmountUnder(dir)
		TeardownPodNetwork(cfg, types.UID(e.Name()))
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
		klog.InfoS("Removed a pod left by an earlier run", "uid", e.Name())
	}
	return nil
}

// unmountUnder detaches every mount at or below dir (deepest first).
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMount(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil {
			klog.ErrorS(err, "Unmounting", "path", points[i])
		}
	}
}

func unescapeMount(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
