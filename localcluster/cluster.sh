#!/usr/bin/env bash
# The local development cluster "cache-dev": real etcd, kube-apiserver, kube-controller-manager and
# kube-scheduler run as local processes by kwokctl (binary runtime). Two kinds of nodes:
#   - real-{a,b,c} (label cache.example.com/node=real): bin/cluster/node-agent, whose pods run as
#     Linux processes under runc, each in its own network namespace on the cluster's bridge;
#   - kwok-node-{a,b,c} (taint kwok.x-k8s.io/node=fake:NoSchedule): KWOK simulates their pods, for
#     scale tests and benchmarks. A namespace annotated as in localcluster/kwok-namespace.yaml runs
#     its pods there.
# bin/cluster/local-provisioner binds PersistentVolumeClaims to folders under .cluster/volumes/.
# bin/cluster/objectstore (versitygw, an S3 server; localcluster/objectstore) serves the bucket
# cache-backups at http://<gateway>:9000 (path-style) to pods and to this machine.
#
#   cluster.sh up                create the cluster, or start whatever part of it is not running
#   cluster.sh down              stop every process it started and delete everything it made
#   cluster.sh stop-node NODE    kill a real node's agent and all its pods' processes (a node failure)
#   cluster.sh start-node NODE   start a stopped real node again
#   cluster.sh stop-objectstore  stop the object store (an unreachable store); start-objectstore again
#   cluster.sh objectstore-env   print the store's endpoint, bucket and keys as shell assignments
#
# Network (all of it on this machine, from 198.18.0.0/15, RFC 2544's benchmarking range). Cluster
# index k (CLUSTER_NET_INDEX 0-3; by name: cache-dev 0, cache-test 1, cache-bench 3, others 2) picks
# a disjoint quarter, so that make up's, make test's and make bench's clusters run side by side:
#   198.18.(64k).0/18       pod network: bridge br0 at .1 (the pods' gateway and CoreDNS)
#   198.18.(64k+1+i).0/24   podCIDR of real node i
#   198.19.(64k).0/19       Service ClusterIPs (kube-proxy, iptables mode)
#   198.19.(64k+63).0/30    link between this machine (.1, the API server's advertise address) and
#                           the cluster's network namespace <name>-net (.2), which holds the bridge,
#                           kube-proxy's rules and CoreDNS, and has no route off the machine.
#   ports 32700+8k..+5      the control plane's, on this machine (the API server's is +2)
#   ports 10250+10k+i       real node i's kubelet API, on 127.0.0.1
#
# Files (all under .cluster/, git-ignored):
#   .cluster/kubeconfig        admin kubeconfig (the user's ~/.kube/config is never touched)
#   .cluster/audit.log         API audit log: every mutating request with user and user agent
#   .cluster/kwok/             kwokctl's workdir (component logs under clusters/cache-dev/logs/)
#   .cluster/volumes/          folders behind the provisioned PersistentVolumes
#   .cluster/nodes/<node>/     a real node's state (pods, logs, runc); its log is .cluster/<node>.log
#   .cluster/*.pid, *.log      PIDs and logs of the provisioner, kube-proxy, CoreDNS and node agents
#   .cluster/objectstore/      the object store: credentials (keys made once) and data/<bucket>/
#
# Environment:
#   CLUSTER_NAME, CLUSTER_DIR  another cluster beside the development one (make test uses
#                         cache-test in .cluster-test/, so it never disturbs `make up`)
#   DISABLE_QPS_LIMITS=1  create the cluster with the client rate limits of kube-controller-manager
#                         and kube-scheduler lifted (for benchmarks); takes effect on creation, so
#                         run `make cluster-down` first to switch an existing cluster.
#   REAL_NODES=0          no real nodes (KWOK only)
#   MAX_RESTART_PERIOD=D  the real nodes' longest CrashLoopBackOff delay (default 5m, the kubelet's;
#                         make test uses 10s, as a kubelet's crashLoopBackOff.maxContainerRestartPeriod
#                         can, so that a test that kills the same member again and again waits 10 s
#                         for it, not minutes; kept in .cluster/max-restart-period for later starts)
#   OBJECTSTORE_DIR=DIR   keep the object store's keys and buckets there instead (a later cluster
#                         started with the same DIR finds the same bucket: a restore from the
#                         bucket alone); cluster.sh down deletes it only under the cluster's folder
#   AUDIT_LOG_MAX_MB=N    rotate the audit log at N MB (default 100, the API server's; 0: never, as
#                         the benchmark needs: it reads the log by offset)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
bin=${CLUSTER_BIN_DIR:-$root/bin/cluster}
state=${CLUSTER_DIR:-$root/.cluster}
name=${CLUSTER_NAME:-cache-dev}
# A node started later (stop-node, start-node, restart) keeps the setting the cluster was made with.
max_restart_period=${MAX_RESTART_PERIOD:-$(cat "$state/max-restart-period" 2>/dev/null || echo 5m)}
export KWOK_WORKDIR=$state/kwok
kubeconfig=$state/kubeconfig
kubectl=("$bin/kubectl" --kubeconfig "$kubeconfig" --cache-dir "$state/kubectl-cache")

log() { echo "cluster: $*"; }

# PID files: hack/pids.sh (a PID with its start time; a reused PID is never signalled). A file
# from before start times were recorded is trusted if the process names this cluster's folder.
pid_trust=("$state/" "$bin/")
# shellcheck source=../hack/pids.sh
. "$root/hack/pids.sh"

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
	local deadline=$((SECONDS + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "timed out waiting for $what"
			return 1
		fi
		sleep 1
	done
}

objectstore_dir=${OBJECTSTORE_DIR:-$state/objectstore}
objectstore_port=9000
objectstore_bucket=cache-backups
# --- the cluster's network -------------------------------------------------------------------
case $name in cache-dev) def_index=0 ;; cache-test) def_index=1 ;; cache-bench) def_index=3 ;; *) def_index=2 ;; esac
net_index=${CLUSTER_NET_INDEX:-$def_index}
[[ $net_index =~ ^[0-3]$ ]] || { log "CLUSTER_NET_INDEX must be 0, 1, 2 or 3"; exit 2; }
base=$((net_index * 64))
pod_net=198.18.$base.0/18
gateway=198.18.$base.1
svc_net=198.19.$base.0/19
link_host=198.19.$((base + 63)).1 # this machine's end: the API server's advertise address
link_peer=198.19.$((base + 63)).2
# The control plane's ports on this machine (etcd, its peers, the API server, the controller
# manager, the scheduler, KWOK): 32700 + 8k ... + 5, below Linux's ephemeral range (from 32768), so
# that no outgoing connection holds one when the cluster starts.
control_ports=$((32700 + 8 * net_index))
netns=$name-net
host_veth=cachenet$net_index
real_nodes=(a b c)
pki=$KWOK_WORKDIR/clusters/$name/pki

# check_routes: this machine has no route in the cluster's ranges that this script did not make
# (one through $host_veth). A route someone else made in 198.18.0.0/15 (a VPN, a lab network, the
# other cluster's ranges under another name) is never replaced: the script stops, naming it.
check_routes() {
	local prefix line foreign=0
	for prefix in "$pod_net" "$svc_net"; do
		while IFS= read -r line; do
			[[ -z $line ]] && continue
			if [[ " $line " != *" dev $host_veth "* ]]; then
				log "refusing to route $prefix: this machine already has the route '$line', which this script did not make (remove it, or choose CLUSTER_NET_INDEX)"
				foreign=1
			fi
		done < <(ip -o route show root "$prefix"; ip -o route show match "$prefix" | grep -v '^default ' || true)
	done
	return "$foreign"
}

net_up() {
	check_routes || exit 1
	if ! ip netns list | grep -qx "$netns\( .*\)\?"; then
		log "creating network namespace $netns (bridge br0 $gateway, pods $pod_net, services $svc_net)"
		ip netns add "$netns"
	fi
	ip -n "$netns" link set lo up
	if ! ip -n "$netns" link show br0 >/dev/null 2>&1; then
		ip -n "$netns" link add br0 type bridge
		ip -n "$netns" addr add "$gateway/18" dev br0
	fi
	ip -n "$netns" link set br0 up
	if ! ip link show "$host_veth" >/dev/null 2>&1; then
		ip link add "$host_veth" type veth peer name uplink netns "$netns"
		ip addr add "$link_host/30" dev "$host_veth"
		ip -n "$netns" addr add "$link_peer/30" dev uplink
	fi
	ip link set "$host_veth" up
	ip -n "$netns" link set uplink up
	ip netns exec "$netns" sysctl -qw net.ipv4.ip_forward=1
	ip route replace "$pod_net" via "$link_peer"
	ip route replace "$svc_net" via "$link_peer"
}

net_down() {
	local ns
	for ns in $(ip netns list | awk '{print $1}' | grep "^$netns-p-" || true); do
		ip netns del "$ns" 2>/dev/null || true
	done
	ip link del "$host_veth" 2>/dev/null || true
	ip netns del "$netns" 2>/dev/null || true
}

# kwokctl's configuration: API server flags for the network, the real nodes' kubelet API and
# placement; node failure detected in about 25 s (kwokctl's default heartbeat factor makes it 200 s);
# KWOK limited to its own nodes. (A file, not --extra-args: kwokctl mis-indexes --extra-args given
# for several components.)
write_kwokctl_config() {
	cat >"$state/kwokctl.yaml" <<YAML
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  # Ours, not a download (kwokctl otherwise fetches one from dl.k8s.io when none is on the PATH).
  kubectlBinary: "$bin/kubectl"
  heartbeatFactor: 1
  kubeControllerManagerNodeMonitorPeriodMilliseconds: 2000
  kubeControllerManagerNodeMonitorGracePeriodMilliseconds: 25000
  kubeApiserverCertSANs: ["$link_host", "198.19.$base.1", "localhost", "127.0.0.1"]
  # Ports of the cluster's own (kwokctl otherwise takes the highest free ones below 32768 when it
  # creates a cluster: two clusters created at once took the same ones).
  etcdPort: $((control_ports + 0))
  etcdPeerPort: $((control_ports + 1))
  kubeApiserverPort: $((control_ports + 2))
  kubeControllerManagerPort: $((control_ports + 3))
  kubeSchedulerPort: $((control_ports + 4))
  kwokControllerPort: $((control_ports + 5))
componentsPatches:
- name: kube-apiserver
  extraArgs:
  - {key: service-cluster-ip-range, value: "$svc_net"}
  - {key: advertise-address, value: "$link_host"}
  - {key: kubelet-client-certificate, value: "$pki/admin.crt"}
  - {key: kubelet-client-key, value: "$pki/admin.key"}
  - {key: enable-admission-plugins, value: "PodNodeSelector,PodTolerationRestriction"}
  - {key: audit-log-maxsize, value: "${AUDIT_LOG_MAX_MB:-100}"}
# Close open watches within 5 s of a SIGTERM (rate-limited, as production clusters configure it);
# by default a stop waits for the HTTP server's 60 s timeout while informers keep watches open.
  - {key: shutdown-watch-termination-grace-period, value: "5s"}
# kwokctl's binary runtime starts KWOK managing every node; it must leave the real ones alone.
- name: kwok-controller
  extraArgs:
  - {key: manage-all-nodes, value: "false"}
  - {key: manage-nodes-with-annotation-selector, value: "kwok.x-k8s.io/node=fake"}
YAML
}

start_bg() { # start_bg NAME COMMAND...: start a process in the background unless it runs
	local what=$1
	shift
	if pid_alive "$state/$what.pid"; then return; fi
	log "starting $what"
	nohup "$@" >>"$state/$what.log" 2>&1 &
	write_pid "$state/$what.pid" $!
}

node_index() {
	local i
	for i in "${!real_nodes[@]}"; do
		if [[ real-${real_nodes[$i]} == "$1" ]]; then echo "$i"; fi
	done
}

start_node() { # start_node real-a
	local node=$1 i zone
	i=$(node_index "$node")
	[[ -n $i ]] || { log "no real node $node (real-a, real-b, real-c)"; return 1; }
	zone=${real_nodes[$i]}
	echo "$max_restart_period" >"$state/max-restart-period"
	start_bg "$node" "$bin/node-agent" --kubeconfig "$kubeconfig" --node-name "$node" --zone "$zone" \
		--pod-cidr "198.18.$((base + 1 + i)).0/24" --pod-network "$pod_net" --gateway "$gateway" \
		--cluster-netns "$netns" --cluster-dns "$gateway" --state-dir "$state/nodes/$node" \
		--images "$here/node/images.yaml" --listen "127.0.0.1:$((10250 + 10 * net_index + i))" \
		--client-ca "$pki/ca.crt" --cgroup-parent "/cache-nodes/$name/$node" --volume-root "$state/volumes" \
		--max-container-restart-period "$max_restart_period"
}

# objectstore_env prints the object store's endpoint, bucket, region and keys (made once, kept in
# $objectstore_dir/credentials) as shell assignments.
objectstore_env() {
	local creds=$objectstore_dir/credentials
	if [[ ! -s $creds ]]; then
		mkdir -p "$objectstore_dir"
		(umask 077 && printf 'OBJECTSTORE_ACCESS_KEY=%s\nOBJECTSTORE_SECRET_KEY=%s\n' \
			"cache$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')" "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$creds.tmp")
		mv "$creds.tmp" "$creds"
	fi
	cat "$creds"
	printf 'OBJECTSTORE_ENDPOINT=http://%s:%s\nOBJECTSTORE_BUCKET=%s\nOBJECTSTORE_REGION=us-east-1\n' \
		"$gateway" "$objectstore_port" "$objectstore_bucket"
}

# s3_request METHOD PATH: one signed request to the object store (curl's SigV4), its HTTP status
# on stdout.
s3_request() {
	local empty=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
	curl -sS -o /dev/null -w '%{http_code}' --max-time 5 --aws-sigv4 "aws:amz:us-east-1:s3" \
		--user "$OBJECTSTORE_ACCESS_KEY:$OBJECTSTORE_SECRET_KEY" -H "x-amz-content-sha256: $empty" \
		-X "$1" "$OBJECTSTORE_ENDPOINT$2" 2>/dev/null || true
}

# start_objectstore runs the S3 server in the cluster's network namespace, on the pods' gateway,
# and creates the bucket. It stands in for a store on other machines: at nice 10, its work for a
# backup (checksums, writes) yields this machine's two cores to the members it would not share
# them with.
start_objectstore() {
	eval "$(objectstore_env)"
	mkdir -p "$objectstore_dir/data"
	ROOT_ACCESS_KEY=$OBJECTSTORE_ACCESS_KEY ROOT_SECRET_KEY=$OBJECTSTORE_SECRET_KEY \
		start_bg objectstore ip netns exec "$netns" nice -n 10 "$bin/objectstore" --port "$gateway:$objectstore_port" \
		--quiet posix "$objectstore_dir/data"
	local deadline=$((SECONDS + 30)) code
	until [[ $(s3_request HEAD "/$objectstore_bucket") == 200 ]]; do
		code=$(s3_request PUT "/$objectstore_bucket")
		[[ $code == 200 || $code == 409 ]] && continue
		if ! pid_alive "$state/objectstore.pid" || ((SECONDS >= deadline)); then
			log "the object store did not serve the bucket $objectstore_bucket (last HTTP status '$code'); last lines of $state/objectstore.log:"
			tail -n 5 "$state/objectstore.log" >&2
			return 1
		fi
		sleep 0.3
	done
	log "object store ready: $OBJECTSTORE_ENDPOINT, bucket $objectstore_bucket"
}

stop_objectstore() {
	if pid_alive "$state/objectstore.pid"; then pid_kill "$state/objectstore.pid"; fi
	local deadline=$((SECONDS + 15))
	while pid_alive "$state/objectstore.pid" && ((SECONDS < deadline)); do sleep 0.2; done
	rm -f "$state/objectstore.pid"
	log "object store stopped"
}

# wait_node NODE: the node's agent runs and its Node is Ready; otherwise show the agent's log.
wait_node() {
	local node=$1 deadline=$((SECONDS + 60))
	until "${kubectl[@]}" get node "$node" >/dev/null 2>&1 &&
		[[ $("${kubectl[@]}" get node "$node" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]; do
		if ! pid_alive "$state/$node.pid" || ((SECONDS >= deadline)); then
			log "node $node did not become Ready; last lines of $state/$node.log:"
			tail -n 5 "$state/$node.log" >&2
			return 1
		fi
		sleep 0.5
	done
}

# stop_node NODE: what a node failure does: the agent dies, and every process of its pods with it.
stop_node() {
	local node=$1 dir=$state/nodes/$1 id
	if pid_alive "$state/$node.pid"; then
		pid_kill "$state/$node.pid" KILL
	fi
	rm -f "$state/$node.pid"
	if [[ -d $dir/runc ]]; then
		for id in $(runc --root "$dir/runc" list -q 2>/dev/null); do
			runc --root "$dir/runc" kill "$id" KILL 2>/dev/null || true
		done
	fi
	log "stopped node $node (agent and pods killed)"
}

up() {
	for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwokctl local-provisioner kube-proxy coredns node-agent objectstore; do
		[[ -x $bin/$b ]] || { log "missing $bin/$b: run 'make cluster-bin'"; exit 1; }
	done
	mkdir -p "$state"
	local start=$SECONDS
	if [[ ${REAL_NODES:-1} == 1 ]]; then net_up; fi
	write_kwokctl_config
	local -a extra=()
	[[ ${DISABLE_QPS_LIMITS:-} == 1 ]] && extra+=(--disable-qps-limits)
	log "starting cluster $name (kwokctl, binary runtime) ..."
	"$bin/kwokctl" --config "$state/kwokctl.yaml" create cluster --name "$name" --runtime binary \
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

	"${kubectl[@]}" apply -f "$here/nodes.yaml" >/dev/null
	if ! "${kubectl[@]}" apply -f "$here/storageclass.yaml" >/dev/null 2>&1; then
		# A class's provisioner and binding mode cannot change: a cluster made by an older
		# version of this script has its classes replaced (claims that exist keep their volumes).
		echo "cluster: replacing the storage classes (their binding mode changed)"
		"${kubectl[@]}" replace --force -f "$here/storageclass.yaml" >/dev/null
	fi
	start_bg provisioner "$bin/local-provisioner" --kubeconfig "$kubeconfig" --root "$state/volumes"

	if [[ ${REAL_NODES:-1} == 1 ]]; then
		# Components inside the cluster's namespace reach the API server over the link.
		sed "s#server: https://[^:]*:#server: https://$link_host:#" "$kubeconfig" >"$state/kubeconfig-netns"
		start_bg kube-proxy ip netns exec "$netns" "$bin/kube-proxy" --kubeconfig "$state/kubeconfig-netns" \
			--proxy-mode iptables --cluster-cidr "$pod_net" --hostname-override real-a --masquerade-all \
			--conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 --conntrack-tcp-timeout-close-wait 0 \
			--metrics-bind-address 127.0.0.1:10249 --healthz-bind-address 127.0.0.1:10256 --v 1
		cat >"$state/Corefile" <<COREFILE
cluster.local:53 in-addr.arpa:53 {
    bind $gateway
    errors
    cache 30
    kubernetes cluster.local in-addr.arpa {
        kubeconfig $state/kubeconfig-netns
        pods verified
    }
}
.:53 {
    bind $gateway
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
COREFILE
		start_bg coredns ip netns exec "$netns" "$bin/coredns" -conf "$state/Corefile"
		start_objectstore
		local n
		for n in "${real_nodes[@]}"; do start_node "real-$n"; done
		for n in "${real_nodes[@]}"; do wait_node "real-$n"; done
	fi
	"${kubectl[@]}" wait --for=condition=Ready node --all --timeout=90s >/dev/null
	wait_for 60 "the default ServiceAccount" "${kubectl[@]}" get serviceaccount default -n default
	log "ready in $((SECONDS - start))s: $("${kubectl[@]}" get nodes --no-headers | wc -l) nodes"
	cat <<MSG
cluster: to use it:  export KUBECONFIG=$kubeconfig
cluster: audit log:  $state/audit.log     stop and delete: make cluster-down
MSG
}

down() {
	local f node
	# Real nodes first: their agents stop their pods' processes.
	for f in "$state"/real-*.pid; do
		[[ -f $f ]] || continue
		node=$(basename "$f" .pid)
		pid_kill "$f"
	done
	for f in "$state"/real-*.pid; do
		[[ -f $f ]] || continue
		local deadline=$((SECONDS + 20))
		while pid_alive "$f" && ((SECONDS < deadline)); do sleep 0.2; done
		stop_node "$(basename "$f" .pid)" >/dev/null
	done
	if [[ -x $bin/kwokctl && -d $KWOK_WORKDIR/clusters/$name ]]; then
		log "deleting cluster $name"
		"$bin/kwokctl" delete cluster --name "$name" --kubeconfig "$kubeconfig" || true
	fi
	for f in "$state"/*.pid; do
		[[ -f $f ]] || continue
		if pid_alive "$f"; then
			log "stopping $(basename "$f" .pid) (PID $(pid_of "$f"))"
			pid_kill "$f"
			local deadline=$((SECONDS + 15))
			while pid_alive "$f" && ((SECONDS < deadline)); do sleep 0.2; done
			pid_kill "$f" KILL
		fi
	done
	# Containers of a node whose agent was already gone.
	for f in "$state"/nodes/*/runc; do
		[[ -d $f ]] || continue
		local id
		for id in $(runc --root "$f" list -q 2>/dev/null); do
			runc --root "$f" kill "$id" KILL 2>/dev/null || true
			runc --root "$f" delete --force "$id" 2>/dev/null || true
		done
	done
	# kwokctl stops its components by PID; a process of this cluster (its command line names the
	# cluster's folder) still running is a leak: report and end it.
	local left
	left=$(pgrep -f "^($bin/|$state/kwok/|ip netns exec $netns )[^ ]+ .*$state/" || true)
	if [[ -n $left ]]; then
		log "ending leftover processes: $left"
		kill -9 $left 2>/dev/null || true
	fi
	# Mounts (memory-backed emptyDirs) under the state folder, deepest first.
	if [[ -d $state ]]; then
		awk -v s="$state/" 'index($5, s) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
			umount -l "$m" 2>/dev/null || true
		done
	fi
	net_down
	local cg
	for cg in /sys/fs/cgroup/*/cache-nodes/"$name" /sys/fs/cgroup/unified/cache-nodes/"$name"; do
		[[ -d $cg ]] && find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	rmdir /sys/fs/cgroup/*/cache-nodes 2>/dev/null || true # only when no other cluster uses it
	rm -rf "$state"
	log "down"
}

# control_ports_free: no process listens on the control plane's ports.
control_ports_free() {
	! ss -Hltn "( sport >= :$control_ports and sport <= :$((control_ports + 5)) )" | grep -q .
}

# restart stops the whole cluster (the real nodes with their pods, then the control plane) and
# starts it again from its stored state, as after a power cut: etcd keeps every object.
restart() {
	local start=$SECONDS n
	if [[ ${REAL_NODES:-1} == 1 ]]; then for n in "${real_nodes[@]}"; do stop_node "real-$n"; done; fi
	log "stopping the control plane"
	"$bin/kwokctl" stop cluster --name "$name"
	# kwokctl signals the components and returns; an API server still draining its requests holds
	# its port, and a new one started meanwhile fails to listen and is not started again (seen on
	# a loaded machine: "bind: address already in use", then no API server).
	wait_for 60 "the stopped control plane to let go of its ports" control_ports_free
	log "starting the control plane"
	"$bin/kwokctl" start cluster --name "$name"
	wait_for 60 "the API server" "${kubectl[@]}" get --raw /readyz
	if [[ ${REAL_NODES:-1} == 1 ]]; then
		for n in "${real_nodes[@]}"; do start_node "real-$n"; done
		for n in "${real_nodes[@]}"; do wait_node "real-$n"; done
	fi
	log "restarted in $((SECONDS - start))s"
}

case ${1:-} in
up) up ;;
down) down ;;
restart) restart ;;
stop-node) stop_node "${2:?node name}" ;;
check-routes) check_routes ;;
stop-objectstore) stop_objectstore ;;
start-objectstore) start_objectstore ;;
objectstore-env) objectstore_env ;;
start-node) start_node "${2:?node name}" && wait_node "$2" ;;
*) echo "usage: $0 up|down|restart|stop-node NODE|start-node NODE|check-routes|stop-objectstore|start-objectstore|objectstore-env" >&2; exit 2 ;;
esac
