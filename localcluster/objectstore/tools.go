//go:build tools

// Package tools pins the local cluster's object store: versitygw (github.com/versity/versitygw,
// Apache-2.0), an S3 server whose posix backend keeps each bucket as a folder and each object as
// a file. make cluster-bin builds it into bin/cluster/objectstore; cluster.sh runs it in the
// cluster's network namespace, where pods and this machine reach it. It has its own module, out
// of localcluster/go.work, so that its dependencies (the AWS SDK, fiber, ...) never move the versions
// the Kubernetes binaries are built with.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
