// Command node-agent is a node of the local development cluster whose pods really run: it
// registers a Node through virtual-kubelet's node library (node status, Lease heartbeats, pod
// sync, the kubelet HTTP API) and runs each pod's containers as Linux processes on this machine,
// each container under runc from Debian, inside the pod's own network namespace.
//
// It is a development tool for tests of the data plane (a real redis-server per pod), not a
// kubelet: README.md ("Real nodes") lists what of the kubelet it reproduces and what it does not.
//
// Layout of --state-dir:
//
//	runc/                  runc's state (--root), one entry per running container
//	pods/<uid>/            one folder per pod: etc/ (hosts, resolv.conf, hostname), volumes/, logs/,
//	                       bundles/ (one OCI bundle per container attempt)
//	cgroups                the cgroup parent of every container of this node
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"example.com/cache-operator/localcluster/node/images"
)

// RealNodeLabel marks the nodes whose pods run as processes (the KWOK nodes carry type=kwok and a
// NoSchedule taint instead). Tests select real nodes with it.
const RealNodeLabel = "cache.example.com/node"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "build-images" {
		os.Exit(buildImages(os.Args[2:]))
	}
	var cfg Config
	cfg.Roots = &images.Store{}
	var kubeconfig, listen, clientCA, zone, podCIDR string
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster")
	flag.StringVar(&cfg.NodeName, "node-name", "", "name of the Node to register")
	flag.StringVar(&zone, "zone", "", "value of the topology.kubernetes.io/zone label")
	flag.StringVar(&podCIDR, "pod-cidr", "", "this node's pod range (a /24 inside --pod-network)")
	flag.StringVar(&cfg.PodNetwork, "pod-network", "", "the cluster's pod range on the bridge, e.g. 198.18.0.0/17")
	flag.StringVar(&cfg.Gateway, "gateway", "", "the bridge's address: every pod's default route")
	flag.StringVar(&cfg.ClusterNetns, "cluster-netns", "", "network namespace holding the bridge and kube-proxy")
	flag.StringVar(&cfg.Bridge, "bridge", "br0", "bridge in --cluster-netns that pods attach to")
	flag.StringVar(&cfg.ClusterDNS, "cluster-dns", "", "nameserver written to every pod's resolv.conf")
	flag.StringVar(&cfg.ClusterDomain, "cluster-domain", "cluster.local", "cluster DNS domain")
	flag.StringVar(&cfg.StateDir, "state-dir", "", "folder for this node's pods, logs and runc state")
	flag.StringVar(&cfg.VolumeRoot, "volume-root", "", "the local provisioner's folder: PersistentVolume folders under it are created and given to the pod's fsGroup; any other is mounted as it is")
	flag.StringVar(&cfg.Runc, "runc", "/usr/sbin/runc", "runc binary")
	flag.StringVar(&cfg.Nsenter, "nsenter", "/usr/bin/nsenter", "nsenter binary, for the exec probes' fast path (enter.go); empty: every probe through runc exec")
	flag.StringVar(&cfg.ImagesFile, "images", "", "image table (YAML): each image's root filesystem or programs")
	flag.StringVar(&cfg.Roots.Dir, "image-store", images.DefaultStoreDir(), "folder of the images' root filesystems, built at the first pull (shared by every node and cluster)")
	flag.StringVar(&cfg.Roots.Mirror, "debian-mirror", images.DefaultMirror, "Debian registry the images' roots are built from")
	flag.StringVar(&cfg.CgroupParent, "cgroup-parent", "", "cgroup path under which containers run (default /cache-nodes/<node-name>)")
	flag.DurationVar(&cfg.MaxBackoff, "max-container-restart-period", DefaultMaxBackoff,
		"longest CrashLoopBackOff delay between restarts of a failed container (the kubelet's crashLoopBackOff.maxContainerRestartPeriod)")
	flag.StringVar(&listen, "listen", "127.0.0.1:10250", "address of the kubelet API (HTTPS)")
	flag.StringVar(&clientCA, "client-ca", "", "CA whose client certificates may use the kubelet API (the API server's)")
	klog.InitFlags(nil)
	flag.Parse()
	if cfg.NodeName == "" || podCIDR == "" || cfg.StateDir == "" || cfg.ClusterNetns == "" || clientCA == "" {
		klog.Exit("--node-name, --pod-cidr, --state-dir, --cluster-netns and --client-ca are required")
	}
	if cfg.CgroupParent == "" {
		cfg.CgroupParent = "/cache-nodes/" + cfg.NodeName
	}
	if err := run(cfg, kubeconfig, listen, clientCA, zone, podCIDR); err != nil {
		klog.ErrorS(err, "node agent failed")
		os.Exit(1)
	}
}

func run(cfg Config, kubeconfig, listen, clientCA, zone, podCIDR string) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	rest, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	rest.QPS, rest.Burst = 50, 100
	rest.UserAgent = "node-agent/" + cfg.NodeName
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	cfg.Client = client
	table, err := images.Load(cfg.ImagesFile)
	if err != nil {
		return err
	}
	cfg.Images = table
	ipam, err := NewIPAM(podCIDR)
	if err != nil {
		return err
	}
	cfg.IPAM = ipam
	tlsConfig, err := ServingTLS(cfg.NodeName, clientCA)
	if err != nil {
		return err
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	var port int32
	if _, err := fmt.Sscan(portText, &port); err != nil {
		return fmt.Errorf("--listen port: %w", err)
	}

	// Leftovers of an earlier run of this node (a crash, a stopped node) are removed first: their
	// pods are started again from the API, as a rebooted kubelet would.
	if err := CleanupNode(ctx, cfg); err != nil {
		return err
	}

	spec := nodeObject(cfg.NodeName, zone, podCIDR, host, port)
	mux := http.NewServeMux()
	var provider *Provider
	n, err := nodeutil.NewNode(cfg.NodeName,
		func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
			cfg.Secrets, cfg.ConfigMaps, cfg.Services = pc.Secrets, pc.ConfigMaps, pc.Services
			cfg.Node = pc.Node
			provider = NewProvider(ctx, cfg)
			return provider, nil, nil
		},
		nodeutil.WithClient(statusOnlyClient{client}), // status writes that never revert labels
		func(c *nodeutil.NodeConfig) error {
			c.NodeSpec = spec
			c.HTTPListenAddr = listen
			c.TLSConfig = tlsConfig
			c.Handler = mux
			c.NumWorkers = 4
			c.InformerResyncPeriod = 10 * time.Minute
			c.SkipDownwardAPIResolution = true // the provider resolves env at every container start
			c.StreamIdleTimeout = 4 * time.Hour
			c.StreamCreationTimeout = 30 * time.Second
			return nil
		},
		nodeutil.AttachProviderRoutes(mux),
	)
	if err != nil {
		return err
	}
	klog.InfoS("Starting node", "node", cfg.NodeName, "podCIDR", podCIDR, "kubeletAPI", listen)
	go func() {
		if err := n.WaitReady(ctx, 2*time.Minute); err == nil {
			klog.InfoS("Node ready", "node", cfg.NodeName)
		}
	}()
	err = n.Run(ctx)
	if provider != nil {
		provider.Shutdown()
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// nodeObject is the Node this agent registers: a Linux node of this machine, labelled real.
func nodeObject(name, zone, podCIDR, host string, port int32) corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	labels := map[string]string{
		"kubernetes.io/hostname": name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"kubernetes.io/role":     "agent",
		"type":                   "real",
		RealNodeLabel:            "real",
	}
	if zone != "" {
		labels["topology.kubernetes.io/zone"] = zone
	}
	var uname syscall.Utsname
	_ = syscall.Uname(&uname)
	return corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR, PodCIDRs: []string{podCIDR}},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodePending,
			Capacity:    capacity,
			Allocatable: capacity,
			Addresses: []corev1.NodeAddress{
				// Only the address: the API server prefers a Hostname address, and node names do
				// not resolve (nor should they reach this machine's resolver).
				{Type: corev1.NodeInternalIP, Address: host},
			},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: port}},
			NodeInfo: corev1.NodeSystemInfo{
				KubeletVersion:          "v1.37.2-node-agent",
				ContainerRuntimeVersion: "runc://debian",
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				KernelVersion:           utsString(uname.Release[:]),
				OSImage:                 "processes on the host (cache-operator node-agent)",
			},
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasNoDiskPressure"},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientPID"},
				{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, Reason: "RouteCreated"},
			},
		},
	}
}

func utsString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

var _ api.ServeMux = (*http.ServeMux)(nil)
