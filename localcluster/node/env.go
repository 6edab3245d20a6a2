package main

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
)

// containerEnv resolves a container's environment at its start, as the kubelet does: service
// links (always the kubernetes Service of the default namespace), envFrom, then env with
// $(VAR) expansion, valueFrom secretKeyRef, configMapKeyRef, fieldRef and resourceFieldRef.
func (r *podRuntime) containerEnv(c *corev1.Container) ([]string, error) {
	r.mu.Lock()
	pod := r.pod.DeepCopy()
	if r.podIP != nil {
		pod.Status.PodIP = r.podIP.String()
		pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	}
	pod.Status.HostIP = nodeInternalIP(r.cfg.Node)
	r.mu.Unlock()

	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	svcEnv, err := r.serviceEnv(pod)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(svcEnv))
	for k := range svcEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set(k, svcEnv[k])
	}
	for _, from := range c.EnvFrom {
		data, optional, err := r.envFromSource(pod.Namespace, from)
		if err != nil {
			if optional {
				continue
			}
			return nil, err
		}
		dk := make([]string, 0, len(data))
		for k := range data {
			dk = append(dk, k)
		}
		sort.Strings(dk)
		for _, k := range dk {
			set(from.Prefix+k, data[k])
		}
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, vars))
			continue
		}
		v, skip, err := r.valueFrom(pod, c, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if !skip {
			set(e.Name, v)
		}
	}
	hostname, _ := r.hostname()
	if _, ok := vars["HOSTNAME"]; !ok {
		set("HOSTNAME", hostname)
	}
	if _, ok := vars["PATH"]; !ok {
		set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	if _, ok := vars["HOME"]; !ok {
		set("HOME", "/")
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+vars[k])
	}
	return out, nil
}

// serviceEnv returns the Docker-link variables of Services: the kubernetes Service always, the
// pod namespace's Services when enableServiceLinks is true (the default).
func (r *podRuntime) serviceEnv(pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	links := pod.Spec.EnableServiceLinks == nil || *pod.Spec.EnableServiceLinks
	svcs, err := r.cfg.Services.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	for _, s := range svcs {
		if s.Spec.ClusterIP == "" || s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		master := s.Namespace == "default" && s.Name == "kubernetes"
		if !master && !(links && s.Namespace == pod.Namespace) {
			continue
		}
		name := strings.ToUpper(strings.ReplaceAll(s.Name, "-", "_"))
		if len(s.Spec.Ports) == 0 {
			continue
		}
		p0 := s.Spec.Ports[0]
		out[name+"_SERVICE_HOST"] = s.Spec.ClusterIP
		out[name+"_SERVICE_PORT"] = strconv.Itoa(int(p0.Port))
		for _, p := range s.Spec.Ports {
			if p.Name != "" {
				out[name+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(p.Name, "-", "_"))] = strconv.Itoa(int(p.Port))
			}
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			prefix := fmt.Sprintf("%s_PORT_%d_%s", name, p.Port, strings.ToUpper(proto))
			out[prefix] = fmt.Sprintf("%s://%s:%d", proto, s.Spec.ClusterIP, p.Port)
			out[prefix+"_PROTO"] = proto
			out[prefix+"_PORT"] = strconv.Itoa(int(p.Port))
			out[prefix+"_ADDR"] = s.Spec.ClusterIP
		}
		out[name+"_PORT"] = fmt.Sprintf("%s://%s:%d", strings.ToLower(string(p0.Protocol)), s.Spec.ClusterIP, p0.Port)
	}
	return out, nil
}

func (r *podRuntime) envFromSource(ns string, from corev1.EnvFromSource) (map[string]string, bool, error) {
	switch {
	case from.ConfigMapRef != nil:
		optional := from.ConfigMapRef.Optional != nil && *from.ConfigMapRef.Optional
		cm, err := r.cfg.ConfigMaps.ConfigMaps(ns).Get(from.ConfigMapRef.Name)
		if err != nil {
			return nil, optional, fmt.Errorf("configmap %q not found", from.ConfigMapRef.Name)
		}
		return cm.Data, optional, nil
	case from.SecretRef != nil:
		optional := from.SecretRef.Optional != nil && *from.SecretRef.Optional
		s, err := r.cfg.Secrets.Secrets(ns).Get(from.SecretRef.Name)
		if err != nil {
			return nil, optional, fmt.Errorf("secret %q not found", from.SecretRef.Name)
		}
		out := map[string]string{}
		for k, v := range s.Data {
			out[k] = string(v)
		}
		return out, optional, nil
	}
	return nil, false, fmt.Errorf("envFrom needs configMapRef or secretRef")
}

// valueFrom resolves one env var's valueFrom. skip is true for an optional reference that is missing.
func (r *podRuntime) valueFrom(pod *corev1.Pod, c *corev1.Container, e corev1.EnvVar) (string, bool, error) {
	vf := e.ValueFrom
	switch {
	case vf.SecretKeyRef != nil:
		ref := vf.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := r.cfg.Secrets.Secrets(pod.Namespace).Get(ref.Name)
		if apierrors.IsNotFound(err) && optional {
			return "", true, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("secret %q not found", ref.Name)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return string(v), false, nil
	case vf.ConfigMapKeyRef != nil:
		ref := vf.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := r.cfg.ConfigMaps.ConfigMaps(pod.Namespace).Get(ref.Name)
		if apierrors.IsNotFound(err) && optional {
			return "", true, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("configmap %q not found", ref.Name)
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", true, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
		}
		return v, false, nil
	case vf.FieldRef != nil:
		v, err := fieldValue(pod, vf.FieldRef.FieldPath)
		return v, false, err
	case vf.ResourceFieldRef != nil:
		v, err := r.resourceValue(pod, c, vf.ResourceFieldRef)
		return v, false, err
	}
	return "", false, fmt.Errorf("valueFrom has no source this node supports")
}

// fieldValue is the downward API's fieldRef.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	if strings.HasPrefix(path, "metadata.labels['") && strings.HasSuffix(path, "']") {
		return pod.Labels[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.labels['"), "']")], nil
	}
	if strings.HasPrefix(path, "metadata.annotations['") && strings.HasSuffix(path, "']") {
		return pod.Annotations[strings.TrimSuffix(strings.TrimPrefix(path, "metadata.annotations['"), "']")], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP":
		return pod.Status.HostIP, nil
	case "status.hostIPs":
		return pod.Status.HostIP, nil
	case "status.podIP":
		return pod.Status.PodIP, nil
	case "status.podIPs":
		ips := make([]string, 0, len(pod.Status.PodIPs))
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
		return strings.Join(ips, ","), nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported", path)
}

func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

// resourceValue is the downward API's resourceFieldRef: a limit defaults to the node's allocatable.
func (r *podRuntime) resourceValue(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	target := c
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		target = nil
		for i := range pod.Spec.Containers {
			if pod.Spec.Containers[i].Name == ref.ContainerName {
				target = &pod.Spec.Containers[i]
			}
		}
		if target == nil {
			return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	var q resource.Quantity
	var ok bool
	var name corev1.ResourceName
	switch ref.Resource {
	case "limits.cpu", "limits.memory", "limits.ephemeral-storage":
		name = corev1.ResourceName(strings.TrimPrefix(ref.Resource, "limits."))
		q, ok = target.Resources.Limits[name]
		if !ok && r.cfg.Node != nil {
			q, ok = r.cfg.Node.Status.Allocatable[name]
		}
	case "requests.cpu", "requests.memory", "requests.ephemeral-storage":
		name = corev1.ResourceName(strings.TrimPrefix(ref.Resource, "requests."))
		q, ok = target.Resources.Requests[name]
		if !ok {
			q, ok = resource.Quantity{}, true
		}
	default:
		return "", fmt.Errorf("resourceFieldRef %q is not supported", ref.Resource)
	}
	if !ok {
		return "0", nil
	}
	if name == corev1.ResourceCPU {
		v := math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue()))
		return strconv.FormatInt(int64(v), 10), nil
	}
	v := math.Ceil(float64(q.Value()) / float64(divisor.Value()))
	return strconv.FormatInt(int64(v), 10), nil
}

// expand replaces $(VAR) with vars' values as Kubernetes does: $$ escapes, unknown references stay.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
