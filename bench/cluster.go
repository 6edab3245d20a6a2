package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/cache-operator/e2e/framework"
)

// clusterScript runs localcluster/cluster.sh for the bench cluster: KWOK nodes only, the client
// limits of kube-controller-manager and kube-scheduler lifted (and the API server's own), an
// audit log that is never rotated (auditReader reads it by offset).
func clusterScript(cfg runConfig, arg string) error {
	cmd := exec.Command(filepath.Join(cfg.root, "localcluster", "cluster.sh"), arg)
	cmd.Env = append(os.Environ(), "CLUSTER_NAME="+cfg.clusterName, "CLUSTER_DIR="+cfg.clusterDir,
		"DISABLE_QPS_LIMITS=1", "REAL_NODES=0", "AUDIT_LOG_MAX_MB=0")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	return cmd.Run()
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port, nil
}

// saKubeconfig writes a kubeconfig that authenticates as the operator's ServiceAccount.
func saKubeconfig(ctx context.Context, c *framework.Cluster) (string, error) {
	token, err := c.Kubectl(ctx, "create", "token", "cache-operator", "-n", "cache-operator-system", "--duration=24h")
	if err != nil {
		return "", err
	}
	kc, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		return "", err
	}
	for name := range kc.AuthInfos {
		kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: strings.TrimSpace(token)}
	}
	path := filepath.Join(c.Dir, "bench-operator.kubeconfig")
	return path, clientcmd.WriteToFile(*kc, path)
}

// install puts the CRD, the operator's namespace and its RBAC into the cluster.
func install(ctx context.Context, c *framework.Cluster) error {
	steps := [][]string{
		{"apply", "--server-side", "--force-conflicts", "-k", filepath.Join(c.Root, "crd")},
		{"wait", "--for=condition=Established", "crd/managedcaches.cache.example.com", "--timeout=60s"},
	}
	for _, s := range steps {
		if _, err := c.Kubectl(ctx, s...); err != nil {
			return err
		}
	}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cache-operator-system"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_, err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-n", "cache-operator-system", "-f", filepath.Join(c.Root, "manifests", "rbac.yaml"))
	return err
}

// kwokNamespace creates a namespace whose pods run on the KWOK nodes.
func kwokNamespace(ctx context.Context, c *framework.Cluster, prefix string) (string, error) {
	name := fmt.Sprintf("%s-%04x", prefix, rand.IntN(1<<16))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: framework.KwokNamespaceAnnotations,
		Labels: map[string]string{guardLabel: "true"}}}
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	return name, poll(time.Minute, "the default ServiceAccount of "+name, func() (bool, string, error) {
		_, err := c.Kube.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, "", err
	})
}

// guardLabel marks the bench's namespaces for guardKwokDeletes.
const guardLabel = "bench.cache.example.com/guard-kwok-deletes"

// guardKwokDeletes installs a ValidatingAdmissionPolicy that refuses KWOK's stale pod deletes in
// the bench's namespaces. KWOK finishes a pod's deletion with a delete by name with grace period
// 0 and no UID precondition (a kubelet sends the UID). When its queue lags, such a delete arrives
// after the StatefulSet controller has made the pod anew under the same name and removes the new
// pod, again and again: the rolling change then measures KWOK, not the operator. The policy
// refuses, from KWOK's user only, a grace-0 delete of a pod that is not being deleted; KWOK drops
// the refused delete.
func guardKwokDeletes(ctx context.Context, c *framework.Cluster) error {
	const name = "bench-kwok-stale-pod-deletes"
	ignore := admissionregistrationv1.Ignore
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &ignore,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				},
			}}},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "kwok", Expression: "request.userInfo.username == 'kwok-admin'"}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: "has(oldObject.metadata.deletionTimestamp) || !(has(request.options.gracePeriodSeconds) && request.options.gracePeriodSeconds == 0)",
				Message:    "refused by the bench: a grace-0 delete by name of a pod that is not being deleted (a stale delete of KWOK's)",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{guardLabel: "true"},
			}},
		},
	}
	adm := c.Kube.AdmissionregistrationV1()
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the policy against KWOK's stale deletes: %w", err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the policy against KWOK's stale deletes: %w", err)
	}
	return nil
}

// kwokCapacity adds simulated nodes (like localcluster/nodes.yaml's) until the KWOK nodes hold
// pods pods with a fifth to spare, and returns the names of those it added.
func kwokCapacity(ctx context.Context, c *framework.Cluster, pods int64) ([]string, error) {
	list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
	if err != nil {
		return nil, err
	}
	var capacity int64
	for _, n := range list.Items {
		capacity += n.Status.Allocatable.Pods().Value()
	}
	const perNode = 500
	var added []string
	for i := 0; capacity < pods*6/5; i++ {
		name := fmt.Sprintf("kwok-bench-%02d", i)
		zone := string(rune('a' + i%3))
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
				Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
					"kubernetes.io/role": "agent", "type": "kwok", "topology.kubernetes.io/zone": zone}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "kwok.x-k8s.io/node", Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		}
		alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
			corev1.ResourcePods: *resource.NewQuantity(perNode, resource.DecimalSI)}
		node.Status.Allocatable, node.Status.Capacity = alloc, alloc
		if _, err := c.Kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return added, err
		}
		added = append(added, name)
		capacity += perNode
	}
	return added, poll(2*time.Minute, "the KWOK nodes Ready", func() (bool, string, error) {
		list, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "type=kwok"})
		if err != nil {
			return false, "", err
		}
		ready := 0
		for _, n := range list.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(list.Items), fmt.Sprintf("%d of %d Ready", ready, len(list.Items)), nil
	})
}

// connect connects to the bench cluster with the bench's own requests unthrottled.
func connect(cfg runConfig) (*framework.Cluster, error) {
	c, err := framework.Connect(cfg.clusterDir, cfg.clusterName, "cache-bench")
	if err != nil {
		return nil, err
	}
	c.Config.QPS = -1
	// A dialer of its own keeps client-go from reusing a transport it cached for the previous
	// cluster of the same name (the key is the kubeconfig's certificate file paths, and a fresh
	// cluster has a new CA at the same path).
	c.Config.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if c.Kube, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	if c.Dynamic, err = dynamic.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// prepare gives the cluster room for the caches' pods (and, with reuse, the oracle's too),
// a KWOK namespace named after prefix, and the foreign objects. It returns the namespace and a
// cleanup that, with reuse, leaves the cluster as it was found.
func prepare(ctx context.Context, cfg runConfig, c *framework.Cluster, prefix string) (string, func(), error) {
	var pods int64
	for i := 0; i < cfg.n; i++ {
		pods += sizeOf(i)
	}
	if cfg.reuse {
		pods *= 2 // the oracle's pods stay while the operator's come
	}
	var namespaces []string
	var addedNodes []string
	cleanup := func() {
		if !cfg.reuse {
			return
		}
		for _, ns := range namespaces {
			_ = c.Kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		}
		for _, n := range addedNodes {
			_ = c.Kube.CoreV1().Nodes().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	}
	if err := guardKwokDeletes(ctx, c); err != nil {
		return "", cleanup, err
	}
	var err error
	if addedNodes, err = kwokCapacity(ctx, c, pods); err != nil {
		return "", cleanup, err
	}
	ns, err := kwokNamespace(ctx, c, prefix)
	if err != nil {
		return "", cleanup, err
	}
	namespaces = append(namespaces, ns)
	if cfg.foreign > 0 {
		foreignNS, err := kwokNamespace(ctx, c, prefix+"-foreign")
		if err != nil {
			return "", cleanup, err
		}
		namespaces = append(namespaces, foreignNS)
		start := time.Now()
		if err := c.CreateForeignObjects(ctx, foreignNS, cfg.foreign); err != nil {
			return "", cleanup, err
		}
		logf("%d foreign objects (Secrets, Services, StatefulSets) created in %s", cfg.foreign, time.Since(start).Round(time.Second))
	}
	return ns, cleanup, nil
}
