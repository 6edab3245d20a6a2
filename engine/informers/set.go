package informers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"example.com/cache-operator/engine/api"
	"example.com/cache-operator/engine/render"
	"example.com/cache-operator/engine/ssa"
)

// The kinds the operator reads by name.
var (
	Secret      = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	ConfigMap   = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	StatefulSet = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"}
	// Pods is the resource of the members' pods.
	Pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	// StatefulSets is the resource of the StatefulSets, for the requests apply cannot make.
	StatefulSets = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
)

// Options tune the informers.
type Options struct {
	// Resync is how often the ManagedCache informer replays every cache (0: never).
	Resync time.Duration
	// Namespace, when set, limits every informer to that namespace ("": the whole cluster).
	Namespace string
	// Kube, if set, serves the informers of built-in kinds (children and pods) as typed objects,
	// which a client configured for protobuf decodes at a fraction of the CPU of JSON into
	// unstructured maps. Other kinds, and every kind when Kube is nil, use dynamic informers.
	Kube kubernetes.Interface
}

// Kind is one kind the templates produce, with its informer.
type Kind struct {
	GVK      schema.GroupVersionKind
	GVR      schema.GroupVersionResource
	Informer cache.SharedIndexInformer
}

// Set is every informer of the operator, with the packer their objects are held in.
type Set struct {
	Packer *Packer
	// Caches holds every ManagedCache.
	Caches cache.SharedIndexInformer
	// Children holds, per kind the templates render, the objects that carry the operator's
	// managed-by label.
	Children []Kind
	// Pods holds the members' pods (labelled likewise), indexed by InstanceIndex.
	Pods cache.SharedIndexInformer
	// Claims holds the members' PersistentVolumeClaims, metadata only, indexed by InstanceIndex.
	// The StatefulSet makes them from its volume templates, which carry the caches' selector
	// labels (not the managed-by label), so they are selected by the name label.
	Claims    cache.SharedIndexInformer
	factories []interface{ Start(stopCh <-chan struct{}) }
}

// New builds the informers: for ManagedCaches, for every kind renderer renders and for pods, the
// last two only for the objects that carry the operator's managed-by label, so that the Services,
// StatefulSets, Secrets and pods of everyone else in the cluster never reach this process.
func New(client dynamic.Interface, mapper meta.RESTMapper, renderer *render.Renderer, opts Options) (*Set, error) {
	s := &Set{}
	var err error
	if s.Packer, err = NewSamplesPacker(renderer); err != nil {
		return nil, err
	}
	selectLabelled := func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{api.LabelManagedBy: api.ManagedByValue}).String()
	}
	ns := opts.Namespace // "" is metav1.NamespaceAll
	all := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, opts.Resync, ns, nil)
	labelled := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, ns, selectLabelled)
	selectClaims := func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(labels.Set{api.LabelName: api.SelectorLabels("")[api.LabelName]}).String()
	}
	claims := dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, ns, selectClaims)
	s.factories = append(s.factories, all, labelled, claims)
	claimInformer := func() cache.SharedIndexInformer { return claims.ForResource(Claims).Informer() }
	// labelledInformer returns the informer of labelled objects of gvr: typed where Kube serves
	// the kind, dynamic otherwise.
	labelledInformer := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
		return labelled.ForResource(gvr).Informer()
	}
	if opts.Kube != nil {
		typed := informers.NewSharedInformerFactoryWithOptions(opts.Kube, 0, informers.WithNamespace(ns), informers.WithTweakListOptions(selectLabelled))
		s.factories = append(s.factories, typed)
		labelledInformer = func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
			if gi, err := typed.ForResource(gvr); err == nil {
				return gi.Informer()
			}
			return labelled.ForResource(gvr).Informer()
		}
		typedClaims := informers.NewSharedInformerFactoryWithOptions(opts.Kube, 0, informers.WithNamespace(ns), informers.WithTweakListOptions(selectClaims))
		s.factories = append(s.factories, typedClaims)
		claimInformer = func() cache.SharedIndexInformer { return typedClaims.Core().V1().PersistentVolumeClaims().Informer() }
	}

	s.Caches = all.ForResource(api.Resource).Informer()
	if err := s.Caches.SetTransform(s.Packer.CacheTransform()); err != nil {
		return nil, err
	}
	kinds, err := renderer.Kinds()
	if err != nil {
		return nil, fmt.Errorf("rendering a sample cache to find the child kinds: %w", err)
	}
	for _, gvk := range kinds {
		gvr, err := ssa.ResourceFor(mapper, gvk)
		if err != nil {
			return nil, fmt.Errorf("child kind %s: %w", gvk, err)
		}
		inf := labelledInformer(gvr)
		if err := inf.SetTransform(s.Packer.ChildTransform(gvk, api.FieldManager)); err != nil {
			return nil, err
		}
		s.Children = append(s.Children, Kind{GVK: gvk, GVR: gvr, Informer: inf})
	}
	s.Pods = labelledInformer(Pods)
	if err := s.Pods.SetTransform(podTransform); err != nil {
		return nil, err
	}
	if err := s.Pods.AddIndexers(cache.Indexers{InstanceIndex: podInstance}); err != nil {
		return nil, err
	}
	s.Claims = claimInformer()
	if err := s.Claims.SetTransform(claimTransform); err != nil {
		return nil, err
	}
	if err := s.Claims.AddIndexers(cache.Indexers{InstanceIndex: podInstance}); err != nil {
		return nil, err
	}
	return s, nil
}

// Start starts the informers and waits until their caches have synced.
func (s *Set) Start(ctx context.Context) error {
	for _, f := range s.factories {
		f.Start(ctx.Done())
	}
	synced := []cache.InformerSynced{s.Caches.HasSynced, s.Pods.HasSynced, s.Claims.HasSynced}
	for _, k := range s.Children {
		synced = append(synced, k.Informer.HasSynced)
	}
	klog.InfoS("Waiting for informer caches to sync", "kinds", len(synced))
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("informer caches did not sync")
	}
	return nil
}

// Cache returns the ManagedCache key (namespace/name) from the informer cache: a copy of its own.
func (s *Set) Cache(key string) (*unstructured.Unstructured, bool, error) {
	obj, exists, err := s.Caches.GetIndexer().GetByKey(key)
	if err != nil || !exists {
		return nil, false, err
	}
	mc, err := s.Packer.Unpack(obj)
	return mc, err == nil, err
}

// kind returns the informer of child kind gvk (nil if it is not watched).
func (s *Set) kind(gvk schema.GroupVersionKind) cache.SharedIndexInformer {
	for _, k := range s.Children {
		if k.GVK == gvk {
			return k.Informer
		}
	}
	return nil
}

// Child returns the live child of kind gvk named namespace/name from the informer cache: a copy
// of its own, decoded from what the cache holds (nil if there is none).
func (s *Set) Child(gvk schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	inf := s.kind(gvk)
	if inf == nil {
		return nil, fmt.Errorf("%s is not a watched child kind", gvk)
	}
	obj, exists, err := inf.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, err
	}
	return s.Packer.Unpack(obj)
}

// PackedChild returns a child as its informer holds it, undecoded (nil if there is none).
func (s *Set) PackedChild(gvk schema.GroupVersionKind, namespace, name string) *Object {
	inf := s.kind(gvk)
	if inf == nil {
		return nil
	}
	obj, _, _ := inf.GetIndexer().GetByKey(namespace + "/" + name)
	p, _ := obj.(*Object)
	return p
}

// UpdateRevision returns the StatefulSet's status.updateRevision from the informer cache ("" if
// there is none), without decoding the StatefulSet: a member pass reads it every time.
func (s *Set) UpdateRevision(namespace, name string) string {
	if p := s.PackedChild(StatefulSet, namespace, name); p != nil {
		return p.UpdateRevision
	}
	return ""
}

// KindIndex returns the index of a child kind in Children (-1 if it is not watched).
func (s *Set) KindIndex(kind string, apiVersion string) int {
	for i, k := range s.Children {
		if k.GVK.Kind == kind && k.GVK.GroupVersion().String() == apiVersion {
			return i
		}
	}
	return -1
}

// CountByReady counts the caches in the informer cache by the status of their Ready condition.
func (s *Set) CountByReady() map[string]int {
	counts := map[string]int{}
	for _, obj := range s.Caches.GetStore().List() {
		if p, ok := obj.(*Object); ok {
			counts[p.Ready]++
		}
	}
	return counts
}

// MemberPods returns the pods of the cache namespace/name: those its StatefulSet (or its shards'
// StatefulSets) controls, and
// those with its labels that nothing controls (a StatefulSet deleted with --cascade=orphan leaves
// its pods running, serving the data, until the one the operator makes again adopts them: taking
// them for gone failed over from a live primary, and lost the writes it acknowledged meanwhile).
// A pod another controller owns (a backup Job's) is none. Each is the informer's own copy: read
// it, never change it.
func (s *Set) MemberPods(namespace, name string) []*Pod {
	objs, err := s.Pods.GetIndexer().ByIndex(InstanceIndex, namespace+"/"+name)
	if err != nil {
		return nil
	}
	var out []*Pod
	for _, o := range objs {
		p, ok := o.(*Pod)
		if !ok {
			continue
		}
		if ref := metav1.GetControllerOfNoCopy(p); ref != nil && (ref.Kind != "StatefulSet" || !api.IsMemberSet(name, ref.Name)) {
			continue
		}
		out = append(out, p)
	}
	return out
}
