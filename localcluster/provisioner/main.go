// Command local-provisioner is the storage provisioner of the local development cluster.
//
// It serves the StorageClass "standard" (provisioner name cache-operator.local/hostpath): every
// pending PersistentVolumeClaim of that class gets a hostPath PersistentVolume backed by a folder
// under --root, and that folder is removed when the volume is released. A bound claim that asks
// for more is expanded (see resizer). The real nodes
// (localcluster/node) mount that folder into their pods, so data outlives a pod; KWOK pods never mount it,
// but their claims bind as on a real cluster. It is a development tool, not a production
// provisioner.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Name is the provisioner name a StorageClass must carry to be served by this process.
const Name = "cache-operator.local/hostpath"

type hostPathProvisioner struct {
	root string
}

// Provision creates the folder of a new volume and returns its PersistentVolume.
func (p *hostPathProvisioner) Provision(_ context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	dir := filepath.Join(p.root, opts.PVName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("PersistentVolume/%s: %w", opts.PVName, err)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if opts.StorageClass.ReclaimPolicy != nil {
		reclaim = *opts.StorageClass.ReclaimPolicy
	}
	hostPathType := corev1.HostPathDirectoryOrCreate
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   opts.PVC.Spec.AccessModes,
			Capacity: corev1.ResourceList{
				corev1.ResourceStorage: opts.PVC.Spec.Resources.Requests[corev1.ResourceStorage],
			},
			StorageClassName: opts.StorageClass.Name,
			VolumeMode:       opts.PVC.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPathType},
			},
		},
	}
	klog.InfoS("Provisioned volume", "pv", opts.PVName, "claim", klog.KObj(opts.PVC), "path", dir)
	return pv, controller.ProvisioningFinished, nil
}

// Delete removes the folder behind a released volume.
func (p *hostPathProvisioner) Delete(_ context.Context, pv *corev1.PersistentVolume) error {
	if !ours(pv, p.root) {
		return &controller.IgnoredError{Reason: "not a volume of this provisioner"}
	}
	if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
		return fmt.Errorf("PersistentVolume/%s: %w", pv.Name, err)
	}
	klog.InfoS("Deleted volume", "pv", pv.Name)
	return nil
}

// ours reports whether pv is a folder under root, made by this provisioner.
func ours(pv *corev1.PersistentVolume, root string) bool {
	return pv.Spec.HostPath != nil && filepath.Dir(pv.Spec.HostPath.Path) == filepath.Clean(root)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "path to the cluster's kubeconfig")
	root := flag.String("root", "", "folder that holds the volumes")
	klog.InitFlags(nil)
	flag.Parse()
	if *root == "" {
		klog.Fatal("--root is required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("loading kubeconfig: %v", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.Fatalf("creating client: %v", err)
	}
	if err := os.MkdirAll(*root, 0o700); err != nil {
		klog.Fatalf("creating %s: %v", *root, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pc := controller.NewProvisionController(ctx, client, Name, &hostPathProvisioner{root: *root},
		controller.LeaderElection(false), controller.Threadiness(4))
	klog.InfoS("Starting provisioner", "name", Name, "root", *root)
	go runResizer(ctx, client, *root)
	pc.Run(ctx)
}
