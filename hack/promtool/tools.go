//go:build tools

// Package tools pins promtool (github.com/prometheus/prometheus, Apache-2.0), which make
// cluster-bin builds into bin/cluster/promtool: `promtool check rules` and `promtool test rules`
// check the PrometheusRule in manifests/monitoring/ and fire and resolve each of its alerts. It has
// its own module, out of hack/go.work, so that Prometheus's dependencies never move the versions
// the Kubernetes binaries are built with.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
