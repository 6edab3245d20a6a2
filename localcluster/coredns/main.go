// Command coredns is the local cluster's DNS server: CoreDNS with only the plugins the cluster
// needs (kubernetes for Service and pod names, template to answer everything else with NXDOMAIN,
// since nothing may leave this machine), built from the Go module proxy. It runs in the cluster's
// network namespace, listening on the pod bridge's address (localcluster/cluster.sh).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// directives is the order of the plugin chain (a subset of CoreDNS's plugin.cfg, in its order).
var directives = []string{"bind", "ready", "health", "errors", "log", "cache", "template", "kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
