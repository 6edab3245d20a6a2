//go:build tools

// Package tools pins KWOK (kwok and kwokctl). It is its own module because KWOK builds
// against an older k8s.io minor than the control plane does.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
	_ "sigs.k8s.io/kwok/cmd/kwokctl"
)
