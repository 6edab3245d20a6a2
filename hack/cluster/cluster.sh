#!/usr/bin/env bash
# The local development cluster "cache-dev": real etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler run as local processes by kwokctl (binary runtime); KWOK simulates three nodes and
# their pods; bin/cluster/local-provisioner binds PersistentVolumeClaims.
#
#   cluster.sh up     create the cluster, or start whatever part of it is not running (idempotent)
#   cluster.sh down   stop every process it started and delete the cluster's files
#
# Files (all under .cluster/, git-ignored):
#   .cluster/kubeconfig        admin kubeconfig (the user's ~/.kube/config is never touched)
#   .cluster/audit.log         API audit log: every mutating request with user and user agent
#   .cluster/kwok/             kwokctl's workdir (component logs under clusters/cache-dev/logs/)
#   .cluster/volumes/          folders behind the provisioned PersistentVolumes
#   .cluster/provisioner.pid   PID of the provisioner; its log is .cluster/provisioner.log
#
# Environment:
#   CLUSTER_NAME, CLUSTER_DIR  another cluster beside the development one (make test uses
#                         cache-test in .cluster-test/, so it never disturbs `make up`)
#   DISABLE_QPS_LIMITS=1  create the cluster with the client rate limits of kube-controller-manager
#                         and kube-scheduler lifted (for benchmarks); takes effect on creation, so
#                         run `make cluster-down` first to switch an existing cluster.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${CLUSTER_BIN_DIR:-$root/bin/cluster}
state=${CLUSTER_DIR:-$root/.cluster}
name=${CLUSTER_NAME:-cache-dev}
export KWOK_WORKDIR=$state/kwok
kubeconfig=$state/kubeconfig
kubectl=("$bin/kubectl" --kubeconfig "$kubeconfig" --cache-dir "$state/kubectl-cache")

log() { echo "cluster: $*"; }

# pid_alive FILE: the PID in FILE names a running process.
pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local deadline=$((SECONDS + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "timed out after $1s waiting for $what"
			return 1
		fi
		sleep 1
	done
}

up() {
	for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl local-provisioner; do
		[[ -x $bin/$b ]] || { log "missing $bin/$b: run 'make cluster-bin'"; exit 1; }
	done
	mkdir -p "$state"
	local start=$SECONDS
	local -a extra=(--extra-args "kube-apiserver=service-cluster-ip-range=10.96.0.0/16")
	[[ ${DISABLE_QPS_LIMITS:-} == 1 ]] && extra+=(--disable-qps-limits)
	log "starting cluster $name (kwokctl, binary runtime) ..."
	"$bin/kwokctl" create cluster --name "$name" --runtime binary \
		--kubeconfig "$kubeconfig" \
		--etcd-binary "$bin/etcd" \
		--kube-apiserver-binary "$bin/kube-apiserver" \
		--kube-controller-manager-binary "$bin/kube-controller-manager" \
		--kube-scheduler-binary "$bin/kube-scheduler" \
		--kwok-controller-binary "$bin/kwok" \
		--kube-audit-policy "$here/audit-policy.yaml" \
		--wait 2m "${extra[@]}"
	ln -sfn "$KWOK_WORKDIR/clusters/$name/logs/audit.log" "$state/audit.log"
	wait_for 60 "the API server" "${kubectl[@]}" get --raw /readyz

	"${kubectl[@]}" apply -f "$here/nodes.yaml" -f "$here/storageclass.yaml" >/dev/null
	if ! pid_alive "$state/provisioner.pid"; then
		log "starting the storage provisioner"
		nohup "$bin/local-provisioner" --kubeconfig "$kubeconfig" --root "$state/volumes" \
			>>"$state/provisioner.log" 2>&1 &
		echo $! >"$state/provisioner.pid"
	fi
	"${kubectl[@]}" wait --for=condition=Ready node --all --timeout=60s >/dev/null
	wait_for 60 "the default ServiceAccount" "${kubectl[@]}" get serviceaccount default -n default
	log "ready in $((SECONDS - start))s"
	cat <<MSG
cluster: to use it:  export KUBECONFIG=$kubeconfig
cluster: audit log:  $state/audit.log     stop and delete: make cluster-down
MSG
}

down() {
	if [[ -x $bin/kwokctl && -d $KWOK_WORKDIR/clusters/$name ]]; then
		log "deleting cluster $name"
		"$bin/kwokctl" delete cluster --name "$name" --kubeconfig "$kubeconfig" || true
	fi
	local f
	for f in "$state"/*.pid; do
		[[ -f $f ]] || continue
		if pid_alive "$f"; then
			log "stopping $(basename "$f" .pid) (PID $(cat "$f"))"
			kill "$(cat "$f")" 2>/dev/null || true
			local deadline=$((SECONDS + 15))
			while pid_alive "$f" && ((SECONDS < deadline)); do sleep 0.2; done
			pid_alive "$f" && kill -9 "$(cat "$f")" 2>/dev/null || true
		fi
	done
	# kwokctl stops its components by PID; a process of this cluster (its command line names the
	# cluster's folder) still running is a leak: report and end it.
	local left
	left=$(pgrep -f "^($bin/|$state/kwok/)[^ ]+ .*$state/" || true)
	if [[ -n $left ]]; then
		log "ending leftover processes: $left"
		kill -9 $left 2>/dev/null || true
	fi
	rm -rf "$state"
	log "down"
}

case ${1:-} in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
