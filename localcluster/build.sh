#!/usr/bin/env bash
# Builds the local cluster into bin/cluster/: the real nodes' agent (localcluster/node) first, so that the
# nodes' images (root filesystems from Debian packages, localcluster/node/images.yaml) build in the
# background beside the rest; then etcd, kube (kube-apiserver, kube-controller-manager,
# kube-scheduler, kube-proxy and kubectl of Kubernetes v1.37 in one binary, linked under each
# name), kwok and kwokctl (KWOK v0.8.0), CoreDNS, the local storage provisioner and the object
# store (versitygw, localcluster/objectstore): what make up runs, and nothing else.
#
#   build.sh         the cluster (make cluster-bin)
#   build.sh tools   helm (hack/helm), which only the chart's tests use (make helm)
#
# promtool, which only the alerts' tests use, is Debian's (hack/prereqs.sh --test). Versions are
# pinned by the
# go.mod files in localcluster/, localcluster/kwok/, localcluster/coredns/, localcluster/provisioner/
# and localcluster/node/, which are one workspace (localcluster/go.work), so that the dependencies they share have
# one version and are compiled once.
# A binary is rebuilt only when it is missing or when the go.mod/go.sum (or source) that pins it
# changed: a stamp file records the hash of those inputs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
out=${CLUSTER_BIN_DIR:-$root/bin/cluster}
mkdir -p "$out"

export CGO_ENABLED=0
# The compiler and linker collect garbage less often, each process held under a soft memory limit:
# a cold compile of k8s.io/api and apimachinery took 101-105 s instead of 119-129 s (2 cores).
export GOGC=${CLUSTER_BIN_GOGC:-400} GOMEMLIMIT=${CLUSTER_BIN_GOMEMLIMIT:-4GiB}
kube_version=v1.37.2 # keep in step with localcluster/go.mod
kube_commit=unknown
build_date=$(date -u -d @"${SOURCE_DATE_EPOCH:-0}" +%Y-%m-%dT%H:%M:%SZ)

version_ldflags() {
	local major minor
	major=${kube_version#v}; major=${major%%.*}
	minor=${kube_version#v*.}; minor=${minor%%.*}
	local pkg flags=""
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		flags+=" -X '$pkg.gitVersion=$kube_version' -X '$pkg.gitMajor=$major' -X '$pkg.gitMinor=$minor'"
		flags+=" -X '$pkg.gitCommit=$kube_commit' -X '$pkg.gitTreeState=clean' -X '$pkg.buildDate=$build_date'"
	done
	echo "$flags"
}

# inputs_hash DIR... prints one hash over the go.mod, go.sum and Go sources of the given folders
# (not recursive into nested modules) plus this script and the workspace.
inputs_hash() {
	{
		cat "$here/build.sh" "$here/go.work"
		go version
		for d in "$@"; do
			find "$d" -maxdepth 1 -type f \( -name 'go.mod' -o -name 'go.sum' -o -name '*.go' \) -print0 |
				sort -z | xargs -0 cat
		done
	} | sha256sum | cut -d' ' -f1
}

# build MODULE_DIR NAME PACKAGE [LDFLAGS] builds one binary unless its stamp is current.
build() {
	local moddir=$1 name=$2 pkg=$3 extra=${4:-}
	local hash stamp=$out/.$name.stamp
	local dirs=("$moddir")
	[[ $pkg == ./* ]] && dirs+=("$moddir/${pkg#./}")
	hash=$(inputs_hash "${dirs[@]}")
	if [[ -x $out/$name && -f $stamp && $(cat "$stamp") == "$hash" ]]; then
		echo "cluster-bin: $name is up to date"
		return
	fi
	local start=$SECONDS
	echo "cluster-bin: building $name ($pkg) ..."
	(cd "$moddir" && GOWORK=${GOWORK_FOR:-} go build -trimpath -ldflags "-s -w $extra" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	echo "$hash" >"$stamp"
	echo "cluster-bin: built $name in $((SECONDS - start))s"
}

total=$SECONDS
if [[ ${1:-} == tools ]]; then
	# helm is a module of its own (see its tools.go), outside the workspace.
	GOWORK_FOR=off build "$root/hack/helm" helm helm.sh/helm/v4/cmd/helm
	exit 0
fi
ver=$(version_ldflags)
build "$here/node" node-agent .
# The real nodes' images: kept in ~/.cache/cache-operator/images for every cluster and checkout (a
# no-op once built). They need only the node agent and mostly wait on the network and on dpkg, so
# they are built beside the compiles; their log is $out/.images.log.
images_start=$SECONDS
"$out/node-agent" build-images --images "$here/node/images.yaml" >"$out/.images.log" 2>&1 &
images=$!
trap 'kill $images 2>/dev/null || true' EXIT
echo "cluster-bin: building the nodes' images in the background (log: $out/.images.log)"
build "$here" etcd go.etcd.io/etcd/server/v3
# The Kubernetes components are one binary (localcluster/kube): one link instead of five.
build "$here" kube ./kube "$ver"
for name in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl; do
	[[ -L $out/$name && $(readlink "$out/$name") == kube ]] || { rm -f "$out/$name" "$out/.$name.stamp"; ln -s kube "$out/$name"; }
done
build "$here/kwok" kwok sigs.k8s.io/kwok/cmd/kwok
build "$here/kwok" kwokctl sigs.k8s.io/kwok/cmd/kwokctl
build "$here/provisioner" local-provisioner .
build "$here/coredns" coredns .
# The object store (versitygw) is a module of its own, outside the workspace (see its tools.go).
GOWORK_FOR=off build "$here/objectstore" objectstore github.com/versity/versitygw/cmd/versitygw
echo "cluster-bin: all binaries ready in $out ($((SECONDS - total))s)"
if kill -0 "$images" 2>/dev/null; then
	echo "cluster-bin: waiting for the nodes' images ($out/.images.log) ..."
fi
rc=0
wait "$images" || rc=$?
trap - EXIT
if [[ $rc != 0 ]]; then
	echo "cluster-bin: building the nodes' images failed (exit $rc); $out/.images.log ends:" >&2
	tail -n 30 "$out/.images.log" >&2
	exit "$rc"
fi
echo "cluster-bin: images ready ($((SECONDS - images_start))s after they started)"
