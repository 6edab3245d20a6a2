package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"example.com/cache-operator/localcluster/node/images"
)

// Config is what the provider needs to run pods: where, with what, and the cluster's facts.
type Config struct {
	NodeName      string
	PodNetwork    string // the cluster's pod range on the bridge, e.g. 198.18.0.0/17
	Gateway       string // the bridge's address
	ClusterNetns  string
	Bridge        string
	ClusterDNS    string
	ClusterDomain string
	StateDir      string
	// VolumeRoot is the local provisioner's folder: the only place where a PersistentVolume's
	// folder is created and given to the pod's fsGroup. A volume elsewhere is mounted as it is.
	VolumeRoot   string
	Runc         string
	Nsenter      string
	ImagesFile   string
	CgroupParent string
	// MaxBackoff is the longest CrashLoopBackOff delay (DefaultMaxBackoff when zero).
	MaxBackoff time.Duration

	Client     kubernetes.Interface
	Secrets    corev1listers.SecretLister
	ConfigMaps corev1listers.ConfigMapLister
	Services   corev1listers.ServiceLister
	Node       *corev1.Node
	Images     *images.Table
	Roots      *images.Store
	IPAM       *IPAM
}

// Provider implements virtual-kubelet's pod lifecycle on this machine: one podRuntime per pod UID.
type Provider struct {
	cfg Config

	mu     sync.Mutex
	pods   map[types.UID]*podRuntime
	byName map[string]types.UID // namespace/name -> UID of the newest pod of that name
	notify func(*corev1.Pod)
	wg     sync.WaitGroup

	recorder record.EventRecorder
}

// NewProvider returns a provider that runs pods until ctx ends.
func NewProvider(ctx context.Context, cfg Config) *Provider {
	broadcaster := record.NewBroadcaster()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cfg.Client.CoreV1().Events("")})
	go func() {
		<-ctx.Done()
		broadcaster.Shutdown()
	}()
	return &Provider{
		cfg: cfg, pods: map[types.UID]*podRuntime{}, byName: map[string]types.UID{},
		recorder: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "node-agent", Host: cfg.NodeName}),
	}
}

func key(namespace, name string) string { return namespace + "/" + name }

// NotifyPods registers virtual-kubelet's callback for status changes (node.PodNotifier).
func (p *Provider) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = cb
	p.mu.Unlock()
}

func (p *Provider) publish(pod *corev1.Pod) {
	p.mu.Lock()
	cb := p.notify
	p.mu.Unlock()
	if cb != nil {
		cb(pod)
	}
}

// CreatePod starts a pod's sandbox and containers in the background.
func (p *Provider) CreatePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.pods[pod.UID]; ok {
		return nil
	}
	rt := newPodRuntime(p, pod.DeepCopy())
	p.pods[pod.UID] = rt
	p.byName[key(pod.Namespace, pod.Name)] = pod.UID
	klog.InfoS("Creating pod", "pod", klog.KObj(pod), "uid", pod.UID)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		rt.run()
		p.mu.Lock()
		delete(p.pods, pod.UID)
		if p.byName[key(pod.Namespace, pod.Name)] == pod.UID {
			delete(p.byName, key(pod.Namespace, pod.Name))
		}
		p.mu.Unlock()
	}()
	return nil
}

// UpdatePod takes a pod's new metadata (labels and annotations feed the downward API).
func (p *Provider) UpdatePod(_ context.Context, pod *corev1.Pod) error {
	rt := p.runtime(pod.Namespace, pod.Name)
	if rt == nil || rt.uid != pod.UID {
		return errdefs.NotFoundf("pod %s/%s is not on this node", pod.Namespace, pod.Name)
	}
	rt.update(pod.DeepCopy())
	return nil
}

// DeletePod begins a graceful stop: preStop hooks, SIGTERM, the grace period, SIGKILL. It returns at
// once; the pod is reported terminated when its containers have exited.
func (p *Provider) DeletePod(_ context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	rt := p.pods[pod.UID]
	p.mu.Unlock()
	if rt == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", pod.Namespace, pod.Name)
	}
	rt.terminate(pod)
	return nil
}

func (p *Provider) runtime(namespace, name string) *podRuntime {
	p.mu.Lock()
	defer p.mu.Unlock()
	uid, ok := p.byName[key(namespace, name)]
	if !ok {
		return nil
	}
	return p.pods[uid]
}

// GetPod returns the pod with its current status.
func (p *Provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	rt := p.runtime(namespace, name)
	if rt == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	return rt.snapshot(), nil
}

// GetPodStatus returns the pod's current status.
func (p *Provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists the pods running on this node.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	rts := make([]*podRuntime, 0, len(p.pods))
	for _, rt := range p.pods {
		rts = append(rts, rt)
	}
	p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(rts))
	for _, rt := range rts {
		out = append(out, rt.snapshot())
	}
	sort.Slice(out, func(i, j int) bool { return key(out[i].Namespace, out[i].Name) < key(out[j].Namespace, out[j].Name) })
	return out, nil
}

// GetContainerLogs serves kubectl logs (with --previous, --follow, --tail, --since, --timestamps).
func (p *Provider) GetContainerLogs(ctx context.Context, namespace, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	rt := p.runtime(namespace, name)
	if rt == nil {
		return nil, errdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	return rt.logs(ctx, container, opts)
}

// RunInContainer serves kubectl exec.
func (p *Provider) RunInContainer(ctx context.Context, namespace, name, container string, cmd []string, attach api.AttachIO) error {
	rt := p.runtime(namespace, name)
	if rt == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	return rt.exec(ctx, container, cmd, attach)
}

// AttachToContainer is not supported: containers' stdin is not kept open.
func (p *Provider) AttachToContainer(context.Context, string, string, string, api.AttachIO) error {
	return errdefs.InvalidInput("kubectl attach is not supported by the node agent (containers run without stdin); use kubectl logs -f or kubectl exec")
}

// PortForward serves kubectl port-forward: the node dials the pod's IP.
func (p *Provider) PortForward(ctx context.Context, namespace, name string, port int32, stream io.ReadWriteCloser) error {
	rt := p.runtime(namespace, name)
	if rt == nil {
		return errdefs.NotFoundf("pod %s/%s is not on this node", namespace, name)
	}
	return rt.portForward(ctx, port, stream)
}

// GetStatsSummary is not implemented: the node reports no resource usage.
func (p *Provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, fmt.Errorf("stats are not collected by the node agent")
}

// GetMetricsResource is not implemented: the node reports no resource usage.
func (p *Provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, fmt.Errorf("resource metrics are not collected by the node agent")
}

// Shutdown stops every pod at once (the agent is going away; pods come back when it restarts).
func (p *Provider) Shutdown() {
	p.mu.Lock()
	rts := make([]*podRuntime, 0, len(p.pods))
	for _, rt := range p.pods {
		rts = append(rts, rt)
	}
	p.mu.Unlock()
	for _, rt := range rts {
		rt.kill()
	}
	p.wg.Wait()
}
