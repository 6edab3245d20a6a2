// Command kube is the local cluster's Kubernetes components in one binary: kube-apiserver,
// kube-controller-manager, kube-scheduler, kube-proxy and kubectl, chosen by the name it is run
// as (bin/cluster holds a link of each name to it). One binary means one link of the large
// dependency graph they share instead of five, which is most of make cluster-bin's time after the
// first compile. Each behaves exactly as its upstream main (k8s.io/kubernetes/cmd/<name>).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	_ "time/tzdata" // for CronJob time zones (kube-apiserver, kube-controller-manager)

	_ "k8s.io/client-go/plugin/pkg/client/auth"           // kubectl's client auth plugins
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric

	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// components are the commands this binary can be, by name.
var components = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-proxy":              proxy.NewProxyCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name := filepath.Base(os.Args[0])
	if name == "kubectl" {
		// As k8s.io/kubernetes/cmd/kubectl: verbosity is read before the command is built.
		logs.GlogSetter(cmd.GetLogVerbosity(os.Args)) // nolint:errcheck
		if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
			util.CheckErr(err)
		}
		return
	}
	newCommand, ok := components[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: run me as one of kubectl, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy (a link of that name), not %q\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
