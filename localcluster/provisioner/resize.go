package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// resizer expands the volumes of this provisioner, as an external resizer and the kubelet's
// online file-system expansion would together: when a bound claim asks for more than its
// capacity, the PersistentVolume's capacity and then the claim's status capacity become the new
// size (a hostPath folder has no size of its own to grow). The API server admits the larger
// request only when the claim's StorageClass sets allowVolumeExpansion.
type resizer struct {
	client kubernetes.Interface
	root   string
	queue  workqueue.TypedRateLimitingInterface[string]
	claims cache.Indexer
}

func runResizer(ctx context.Context, client kubernetes.Interface, root string) {
	factory := informers.NewSharedInformerFactory(client, 0)
	inf := factory.Core().V1().PersistentVolumeClaims().Informer()
	r := &resizer{client: client, root: root, claims: inf.GetIndexer(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())}
	enqueue := func(obj interface{}) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o interface{}) { enqueue(o) }}); err != nil {
		klog.Fatalf("resizer: %v", err)
	}
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	go func() { <-ctx.Done(); r.queue.ShutDown() }()
	for {
		key, shutdown := r.queue.Get()
		if shutdown {
			return
		}
		if err := r.resize(ctx, key); err != nil {
			klog.ErrorS(err, "Resizing a volume; retrying", "claim", key)
			r.queue.AddRateLimited(key)
		} else {
			r.queue.Forget(key)
		}
		r.queue.Done(key)
	}
}

func (r *resizer) resize(ctx context.Context, key string) error {
	obj, exists, err := r.claims.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pvc := obj.(*corev1.PersistentVolumeClaim)
	want, have := pvc.Spec.Resources.Requests[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" || want.Cmp(have) <= 0 {
		return nil
	}
	pv, err := r.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !ours(pv, r.root) {
		return nil
	}
	if cur := pv.Spec.Capacity[corev1.ResourceStorage]; cur.Cmp(want) < 0 {
		pv = pv.DeepCopy()
		pv.Spec.Capacity[corev1.ResourceStorage] = want
		if _, err := r.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	pvc = pvc.DeepCopy()
	if pvc.Status.Capacity == nil {
		pvc.Status.Capacity = corev1.ResourceList{}
	}
	pvc.Status.Capacity[corev1.ResourceStorage] = want
	pvc.Status.AllocatedResources = corev1.ResourceList{corev1.ResourceStorage: want}
	pvc.Status.AllocatedResourceStatuses = nil
	pvc.Status.Conditions = nil
	if _, err := r.client.CoreV1().PersistentVolumeClaims(pvc.Namespace).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		return err
	}
	klog.InfoS("Resized volume", "claim", klog.KObj(pvc), "pv", pv.Name, "from", have.String(), "to", want.String())
	return nil
}
