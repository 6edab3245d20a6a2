//go:build tools

// Package tools pins helm (helm.sh/helm/v4, Apache-2.0), which make helm (run by make test) builds into
// bin/cluster/helm: the chart's tests run `helm lint`, `helm template`, `helm install`, `helm
// upgrade` and `helm uninstall` with it against the local cluster. It has its own module, out of
// localcluster/go.work, so that its dependencies never move the versions the Kubernetes binaries are
// built with.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
