package plugin

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/yaml"

	"example.com/cache-operator/engine/api"
)

// report writes a tarball for a bug report (-o, default <name>-report.tar.gz): the cache (spec and
// status), its children (Secrets as their keys only), its pods and claims, its backups, the
// Events about any of them, the operator's log lines that name the cache, each member's INFO, and
// what could not be read. Secret values, passwords and ACL hashes are redacted.
func report(ctx context.Context, c *client, name string) error {
	mc, err := c.cache(ctx, name)
	if err != nil {
		return err
	}
	out := c.opts.output
	if out == "" {
		out = name + "-report.tar.gz"
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	var problems []string
	add := func(path string, body []byte) {
		if err := tw.WriteHeader(&tar.Header{Name: name + "-report/" + path, Mode: 0o644, Size: int64(len(body)), ModTime: c.started}); err == nil {
			_, _ = tw.Write(body)
		}
	}
	addObject := func(path string, obj map[string]interface{}) {
		b, err := yaml.Marshal(scrubbed(obj))
		if err != nil {
			problems = append(problems, path+": "+err.Error())
			return
		}
		add(path, redact(b))
	}
	ns := c.ns
	addObject("managedcache.yaml", mc.Object)

	children := []struct {
		gvr  schema.GroupVersionResource
		name string
	}{
		{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, api.ConfigName(name)},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, api.ReadWriteService(name)},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, api.ReadOnlyService(name)},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, name}, // the headless Service
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, name},
		{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, name},
	}
	for _, ch := range children {
		obj, err := c.dyn.Resource(ch.gvr).Namespace(ns).Get(ctx, ch.name, metav1.GetOptions{})
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s %s: %v", ch.gvr.Resource, ch.name, err))
			continue
		}
		addObject(fmt.Sprintf("children/%s-%s.yaml", strings.TrimSuffix(ch.gvr.Resource, "s"), ch.name), obj.Object)
	}
	// Secrets: their metadata and the names of their keys, never a value.
	secrets := []string{api.SecretName(name)}
	if tls, _, _ := unstructured.NestedBool(mc.Object, "spec", "tls", "enabled"); tls {
		secrets = append(secrets, api.TLSSecretName(name))
	}
	for _, sn := range secrets {
		s, err := c.kube.CoreV1().Secrets(ns).Get(ctx, sn, metav1.GetOptions{})
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %s: %v", sn, err))
			continue
		}
		b, err := yaml.Marshal(secretSummary(s))
		if err != nil {
			problems = append(problems, fmt.Sprintf("secret %s: %v", sn, err))
			continue
		}
		add("children/secret-"+sn+".yaml", redact(b))
	}
	sel := labels.SelectorFromSet(api.SelectorLabels(name)).String()
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	for _, p := range pods.Items {
		if obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&p); err == nil {
			addObject("pods/"+p.Name+".yaml", obj)
		}
		info, err := c.memberInfo(ctx, &p)
		if err != nil {
			problems = append(problems, fmt.Sprintf("INFO of %s: %v", p.Name, err))
			continue
		}
		add("members/"+p.Name+"-info.txt", redact([]byte(info)))
	}
	if pvcs, err := c.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{LabelSelector: sel}); err == nil {
		if obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pvcs); err == nil {
			addObject("children/persistentvolumeclaims.yaml", obj)
		}
	}
	if backups, err := c.dyn.Resource(api.BackupResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: api.LabelBackupCache + "=" + name}); err == nil {
		addObject("backups.yaml", backups.UnstructuredContent())
	}
	events, err := c.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err == nil {
		var mine []corev1.Event
		for _, e := range events.Items {
			if ownsName(name, e.InvolvedObject.Name) {
				mine = append(mine, e)
			}
		}
		sort.Slice(mine, func(i, j int) bool { return eventTime(mine[i]).Before(eventTime(mine[j])) })
		var buf bytes.Buffer
		for _, e := range mine {
			fmt.Fprintf(&buf, "%s\t%s\t%s/%s\t%s\t%dx\t%s\n", eventTime(e).UTC().Format("2006-01-02T15:04:05Z"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, max(e.Count, 1), e.Message)
		}
		add("events.txt", redact(buf.Bytes()))
	} else {
		problems = append(problems, "events: "+err.Error())
	}
	logs, where := c.operatorLog(ctx, ns, name)
	add("operator.log", redact(logs))
	add("README.txt", []byte(fmt.Sprintf("Bug report of ManagedCache %s/%s, written %s by kubectl-managedcache.\n"+
		"managedcache.yaml: the cache; children/: its children (Secrets: keys only); pods/: its members; members/: each member's INFO;\n"+
		"backups.yaml, events.txt; operator.log: the operator's lines naming the cache (%s).\n"+
		"Values that look like passwords, keys or ACL hashes are redacted.\n\nNot read:\n  %s\n",
		ns, name, c.started.UTC().Format("2006-01-02T15:04:05Z"), where, strings.Join(append(problems, "")[:max(len(problems), 1)], "\n  "))))
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "wrote %s (%d members, %d problems: see README.txt inside)\n", out, len(pods.Items), len(problems))
	return nil
}

// ownsName reports whether obj is the cache name or one of its members (name-<ordinal>).
func ownsName(name, obj string) bool {
	if obj == name {
		return true
	}
	rest, ok := strings.CutPrefix(obj, name+"-")
	if !ok || rest == "" {
		return false
	}
	for _, r := range rest {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// operatorLog returns the operator's log lines that name the cache: --operator-log, else the
// logs of the pods in the operator's namespace.
func (c *client) operatorLog(ctx context.Context, ns, name string) ([]byte, string) {
	ref := ns + "/" + name
	var buf bytes.Buffer
	filter := func(r io.Reader) {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), ref) {
				buf.Write(sc.Bytes())
				buf.WriteByte('\n')
			}
		}
	}
	if c.opts.operatorLog != "" {
		f, err := os.Open(c.opts.operatorLog)
		if err != nil {
			return []byte(err.Error() + "\n"), c.opts.operatorLog
		}
		defer f.Close()
		filter(f)
		return buf.Bytes(), c.opts.operatorLog
	}
	pods, err := c.kube.CoreV1().Pods(c.opts.operatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: "control-plane=controller-manager"})
	if err != nil || len(pods.Items) == 0 {
		return []byte(fmt.Sprintf("no operator pods in %s (%v); give --operator-log for an operator outside the cluster\n", c.opts.operatorNamespace, err)), "none found"
	}
	for _, p := range pods.Items {
		fmt.Fprintf(&buf, "==> pod %s/%s\n", p.Namespace, p.Name)
		stream, err := c.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).Stream(ctx)
		if err != nil {
			fmt.Fprintf(&buf, "(%v)\n", err)
			continue
		}
		filter(stream)
		stream.Close()
	}
	return buf.Bytes(), "pods in " + c.opts.operatorNamespace
}

// memberInfo runs INFO on the member's server inside its pod, with the command its own probes
// use (the internal user's password from its file, TLS flags when it serves TLS).
func (c *client) memberInfo(ctx context.Context, p *corev1.Pod) (string, error) {
	var cli string
	for _, ct := range p.Spec.Containers {
		if ct.LivenessProbe != nil && ct.LivenessProbe.Exec != nil && len(ct.LivenessProbe.Exec.Command) == 3 {
			if before, _, ok := strings.Cut(ct.LivenessProbe.Exec.Command[2], " ping"); ok {
				cli = before
			}
		}
	}
	if cli == "" {
		return "", fmt.Errorf("no liveness probe to borrow the server's command line from")
	}
	req := c.kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: p.Spec.Containers[0].Name, Command: []string{"sh", "-c", cli + " info everything"}, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(c.config, "GET", req.URL().String())
	if err != nil {
		return "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(c.config, "POST", req.URL())
	if err != nil {
		return "", err
	}
	exec, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.ReplaceAll(stdout.String(), "\r\n", "\n"), nil
}

var secretLike = []*regexp.Regexp{
	// key: value and key=value pairs whose key names a password or a token.
	regexp.MustCompile(`(?im)^(\s*[\w.-]*(?:password|requirepass|masterauth|passwd|secret|token)[\w.-]*\s*[:=\s]\s*)(\S.*)$`),
	// ACL rules: >password and #<sha256> hashes.
	regexp.MustCompile(`(\s)(?:>[^\s"']+|#[0-9a-f]{64})`),
}

// redact blanks what looks like a secret value.
func redact(b []byte) []byte {
	b = secretLike[0].ReplaceAll(b, []byte("${1}<redacted>"))
	return secretLike[1].ReplaceAll(b, []byte("${1}<redacted>"))
}

// lastApplied is the annotation kubectl apply keeps the applied object in, whole, on one line: a
// Secret's data or stringData, a cache's spec.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// scrubbed is obj (an object, or a list with items) without its managed fields and with the
// value of kubectl's last-applied annotation replaced by its size, in obj and in every item.
func scrubbed(obj map[string]interface{}) map[string]interface{} {
	out := runtime.DeepCopyJSON(obj)
	scrub := func(o map[string]interface{}) {
		unstructured.RemoveNestedField(o, "metadata", "managedFields")
		if v, ok, _ := unstructured.NestedString(o, "metadata", "annotations", lastApplied); ok {
			_ = unstructured.SetNestedField(o, fmt.Sprintf("<redacted: %d bytes>", len(v)), "metadata", "annotations", lastApplied)
		}
	}
	scrub(out)
	if items, ok := out["items"].([]interface{}); ok {
		for _, it := range items {
			if o, ok := it.(map[string]interface{}); ok {
				scrub(o)
			}
		}
	}
	return out
}

// secretSummary is what a report keeps of a Secret: its identity, labels, owners and finalizers,
// the names of its keys, and its annotations with only the operator's own values (revisions and
// times); any other annotation may hold what the Secret holds (kubectl apply copies the whole
// object into one), so its value is left out.
func secretSummary(s *corev1.Secret) map[string]interface{} {
	keys := []string{}
	for k := range s.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	annotations := map[string]string{}
	for k, v := range s.Annotations {
		if strings.HasPrefix(k, api.GroupVersion.Group+"/") {
			annotations[k] = v
		} else {
			annotations[k] = fmt.Sprintf("<redacted: %d bytes>", len(v))
		}
	}
	meta := map[string]interface{}{"name": s.Name, "namespace": s.Namespace, "uid": string(s.UID),
		"resourceVersion": s.ResourceVersion, "creationTimestamp": s.CreationTimestamp.UTC().Format(time.RFC3339),
		"labels": s.Labels, "annotations": annotations, "ownerReferences": s.OwnerReferences, "finalizers": s.Finalizers}
	if s.DeletionTimestamp != nil {
		meta["deletionTimestamp"] = s.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	return map[string]interface{}{"metadata": meta, "type": string(s.Type), "keys (values redacted)": keys}
}
