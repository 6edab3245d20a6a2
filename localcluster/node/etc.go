package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

func (r *podRuntime) hostname() (hostname, fqdn string) {
	hostname = r.pod.Name
	if r.pod.Spec.Hostname != "" {
		hostname = r.pod.Spec.Hostname
	}
	if len(hostname) > 63 {
		hostname = strings.TrimRight(hostname[:63], "-.")
	}
	if r.pod.Spec.Subdomain != "" {
		fqdn = fmt.Sprintf("%s.%s.%s.svc.%s", hostname, r.pod.Spec.Subdomain, r.pod.Namespace, r.cfg.ClusterDomain)
	}
	return hostname, fqdn
}

// writeEtc writes the pod's /etc/hosts, /etc/resolv.conf and /etc/hostname as the kubelet does.
func (r *podRuntime) writeEtc() error {
	dir := filepath.Join(r.dir, "etc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hostname, fqdn := r.hostname()
	var hosts strings.Builder
	hosts.WriteString("# Kubernetes-managed hosts file (node-agent).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n")
	if fqdn != "" {
		fmt.Fprintf(&hosts, "%s\t%s\t%s\n", r.podIP, fqdn, hostname)
	} else {
		fmt.Fprintf(&hosts, "%s\t%s\n", r.podIP, hostname)
	}
	for _, a := range r.pod.Spec.HostAliases {
		fmt.Fprintf(&hosts, "\n# Entries added by HostAliases.\n%s\t%s\n", a.IP, strings.Join(a.Hostnames, "\t"))
	}
	resolv := r.resolvConf()
	files := map[string]string{"hosts": hosts.String(), "resolv.conf": resolv, "hostname": hostname + "\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// resolvConf follows the pod's dnsPolicy: ClusterFirst (the default) searches the pod's namespace,
// svc and the cluster domain with ndots:5; None takes dnsConfig alone. Default also uses the
// cluster's DNS: the host's resolvers are off this machine and not reachable from a pod.
func (r *podRuntime) resolvConf() string {
	ns := r.pod.Namespace
	d := r.cfg.ClusterDomain
	servers := []string{r.cfg.ClusterDNS}
	search := []string{ns + ".svc." + d, "svc." + d, d}
	options := []string{"ndots:5"}
	if r.pod.Spec.DNSPolicy == corev1.DNSNone {
		servers, search, options = nil, nil, nil
	}
	if dc := r.pod.Spec.DNSConfig; dc != nil {
		servers = append(servers, dc.Nameservers...)
		search = append(search, dc.Searches...)
		for _, o := range dc.Options {
			if o.Value != nil {
				options = append(options, o.Name+":"+*o.Value)
			} else {
				options = append(options, o.Name)
			}
		}
	}
	var b strings.Builder
	if len(search) > 0 {
		fmt.Fprintf(&b, "search %s\n", strings.Join(search, " "))
	}
	for _, s := range servers {
		fmt.Fprintf(&b, "nameserver %s\n", s)
	}
	if len(options) > 0 {
		fmt.Fprintf(&b, "options %s\n", strings.Join(options, " "))
	}
	return b.String()
}
