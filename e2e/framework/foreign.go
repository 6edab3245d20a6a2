package framework

import (
	"context"
	"fmt"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// CreateForeignObjects creates n objects in ns that are not the operator's, a third each of
// Secrets (1 KiB), headless Services and StatefulSets (no replicas, a pod template of about
// 0.5 KiB), named foreign-NNNNN, with 16 requests in flight. Objects that exist already are kept,
// so a second call with the same n adds nothing.
func (c *Cluster) CreateForeignObjects(ctx context.Context, ns string, n int) error {
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "busybox",
			Command: []string{"sh", "-c", "while true; do sleep 1; done"},
			Env:     []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 256)}, {Name: "B", Value: strings.Repeat("y", 256)}}}}},
	}
	work := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				name := fmt.Sprintf("foreign-%05d", i)
				var err error
				switch i % 3 {
				case 0:
					_, err = c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
						Data: map[string][]byte{"k": []byte(strings.Repeat("s", 1024))}}, metav1.CreateOptions{})
				case 1:
					_, err = c.Kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": name},
							Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
				case 2:
					_, err = c.Kube.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](0), ServiceName: name,
							Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: template}}, metav1.CreateOptions{})
				}
				if err != nil && !apierrors.IsAlreadyExists(err) {
					once.Do(func() { first = fmt.Errorf("creating foreign object %s/%s: %w", ns, name, err) })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}
