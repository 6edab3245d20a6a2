//go:build tools

// Package tools pins the control-plane binaries of the local cluster, whose home this folder is
// (cluster.sh runs it, build.sh builds it; the Kubernetes components through ./kube, one binary).
// Nothing here is
// compiled into the operator: this module exists so that the heavy Kubernetes dependency graph
// and its replace directives stay out of the operator's go.mod.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
