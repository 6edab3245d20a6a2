#!/usr/bin/env bash
# The second half of `make up` (after `make cluster` and `make build`): CRD, namespace shop, the
# operator in the background, then (once it serves) the sample cache, and wait until it is Ready.
# Safe to repeat: it starts the operator only if it is not running, and never touches a sample
# cache that already exists.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
k=("$KUBECTL" --kubeconfig "$DEV_KUBECONFIG" --cache-dir .cluster/kubectl-cache)
pidfile=.cluster/operator.pid
log=.cluster/operator.log
pid_trust=("$OPERATOR")
# shellcheck source=pids.sh
. hack/pids.sh

echo "up: installing the CRD"
"${k[@]}" apply --server-side --force-conflicts -k crd/ >/dev/null
# kubectl wait fails at once on a CRD that has no conditions yet (just created, on a busy API
# server): poll it, for a minute at most.
deadline=$((SECONDS + 60))
until out=$("${k[@]}" wait --for=condition=Established crd/managedcaches.cache.example.com crd/managedcachebackups.cache.example.com --timeout=60s 2>&1); do
	if ((SECONDS >= deadline)); then
		echo "up: the CRDs are not Established after 60 s: $out" >&2
		exit 1
	fi
	sleep 1
done
for ns in shop cache-operator-system; do # the sample's, and the operator's (webhook certificate)
	"${k[@]}" get namespace "$ns" >/dev/null 2>&1 || "${k[@]}" create namespace "$ns" >/dev/null
done
# The backup store of the sample: the local cluster's object store (cluster.sh), its endpoint,
# bucket and keys in the Secret cache-backups, made once.
if ! "${k[@]}" get secret cache-backups -n shop >/dev/null 2>&1; then
	eval "$(localcluster/cluster.sh objectstore-env)"
	echo "up: creating the Secret shop/cache-backups (the object store $OBJECTSTORE_ENDPOINT, bucket $OBJECTSTORE_BUCKET)"
	"${k[@]}" create secret generic cache-backups -n shop --from-literal=endpoint="$OBJECTSTORE_ENDPOINT" \
		--from-literal=bucket="$OBJECTSTORE_BUCKET" --from-literal=region="$OBJECTSTORE_REGION" \
		--from-literal=accessKeyID="$OBJECTSTORE_ACCESS_KEY" --from-file=secretAccessKey=<(printf '%s' "$OBJECTSTORE_SECRET_KEY") >/dev/null
fi

# A rebuilt binary replaces a running operator of an older build.
if pid_alive "$pidfile"; then
	if [[ $OPERATOR -nt $pidfile ]]; then
		echo "up: restarting the operator (new build)"
		pid_kill "$pidfile"
		while pid_alive "$pidfile"; do sleep 0.2; done
	else
		echo "up: the operator is running (PID $(pid_of "$pidfile"))"
	fi
fi
if ! pid_alive "$pidfile"; then
	# As in production: leader election on (a second `make run` would wait as a follower).
	nohup "$OPERATOR" --kubeconfig "$DEV_KUBECONFIG" --leader-elect --member-networks 198.18.0.0/15 \
		--metrics-bind-address 127.0.0.1:8080 --health-probe-bind-address 127.0.0.1:8081 >>"$log" 2>&1 &
	write_pid "$pidfile" $!
	echo "up: started the operator (PID $!, log $log); webhooks on https://127.0.0.1:9443"
fi

# Nothing is applied before the operator serves: a request in v1 needs its conversion webhook.
echo "up: waiting for the operator to serve its webhooks (http://127.0.0.1:8081/readyz) ..."
ready=0
for _ in $(seq 1 60); do
	if curl -fsS http://127.0.0.1:8081/readyz >/dev/null 2>&1; then ready=1; break; fi
	pid_alive "$pidfile" || { echo "up: the operator exited; log:" >&2; tail -n 20 "$log" >&2; exit 1; }
	sleep 1
done
if ((!ready)); then
	echo "up: the operator did not become ready in 60s; last log lines:" >&2
	tail -n 20 "$log" >&2
	exit 1
fi
# The sample is created once and then left alone: a user's later changes (kubectl scale, edit)
# are theirs, and applying the file again would undo or conflict with them.
if "${k[@]}" get managedcache sessions -n shop >/dev/null 2>&1; then
	echo "up: shop/sessions exists; leaving it as it is"
else
	echo "up: creating shop/sessions from manifests/samples/sessions.yaml"
	"${k[@]}" create -f manifests/samples/sessions.yaml >/dev/null
fi
echo "up: waiting for shop/sessions to be Ready (up to 180s) ..."
# Every 5s: Ready ends the wait; a member whose container cannot start (the node reports it as
# the kubelet does) ends it at once, since waiting will not help; otherwise print the progress.
blocked=""
ready=0
for i in $(seq 1 36); do
	if "${k[@]}" wait --for=condition=Ready managedcache/sessions -n shop --timeout=5s >/dev/null 2>&1; then
		ready=1
		break
	fi
	blocked=$("${k[@]}" get pods -n shop -l app.kubernetes.io/instance=sessions \
		-o jsonpath='{range .items[*]}{range .status.containerStatuses[*]}{.state.waiting.reason}{" "}{end}{end}' 2>/dev/null |
		grep -oE 'RunContainerError|CreateContainerError|CreateContainerConfigError|ErrImagePull|ImagePullBackOff' | head -1 || true)
	[[ -n $blocked ]] && break
	echo "up:   $((i * 5))s: $("${k[@]}" get managedcache sessions -n shop -o jsonpath='{.status.readyReplicas}/{.spec.replicas} ready; {range .status.conditions[?(@.type=="Ready")]}{.reason}: {.message}{end}' 2>/dev/null)"
done
if ((!ready)); then
	# What blocks it: each member's state and reason and the pods' Warning Events (the
	# operator's log alone rarely says why a pod does not run).
	if [[ -n $blocked ]]; then
		echo "up: shop/sessions cannot become Ready: a member's container cannot start ($blocked); what blocks it:" >&2
	else
		echo "up: shop/sessions is not Ready after 180s; what blocks it:" >&2
	fi
	KUBECTL=$KUBECTL KUBECONFIG=$DEV_KUBECONFIG hack/diagnose.sh shop sessions >&2
	echo "up: last operator log lines ($log):" >&2
	tail -n 10 "$log" >&2
	exit 1
fi
"${k[@]}" get managedcache -A -o wide
"${k[@]}" get pods -n shop -o wide

# A real round trip: the pods are redis-server processes on the real nodes. The password goes to
# redis-cli through REDISCLI_AUTH, never on a command line or the terminal.
echo "up: redis-cli round trip with shop/sessions (password from its Secret):"
# The Secret is <cache>-auth (see the README's "Every child").
password=$("${k[@]}" get secret sessions-auth -n shop -o jsonpath='{.data.password}' | base64 -d)
rw_ip=$("${k[@]}" get service sessions-rw -n shop -o jsonpath='{.spec.clusterIP}')
primary=$("${k[@]}" get managedcache sessions -n shop -o jsonpath='{.status.primary}')
value="hello-$(date +%s)"
for _ in $(seq 1 30); do
	REDISCLI_AUTH=$password redis-cli -h "$rw_ip" set up:greeting "$value" >/dev/null 2>&1 && break
	sleep 1
done
echo "  SET up:greeting $value through the read-write Service sessions-rw ($rw_ip), primary $primary"
for pod in $("${k[@]}" get managedcache sessions -n shop -o jsonpath='{range .status.members[?(@.role=="replica")]}{.name}{" "}{end}'); do
	ip=$("${k[@]}" get pod "$pod" -n shop -o jsonpath='{.status.podIP}')
	got=""
	for _ in $(seq 1 30); do
		got=$(REDISCLI_AUTH=$password redis-cli -h "$ip" get up:greeting 2>/dev/null || true)
		[[ $got == "$value" ]] && break
		sleep 1
	done
	echo "  GET up:greeting on replica $pod ($ip): $got"
	[[ $got == "$value" ]] || { echo "up: replica $pod did not return the value written through sessions-rw" >&2; exit 1; }
done
unset password
cat <<MSG

The cache is Ready. Next:
  export KUBECONFIG=$DEV_KUBECONFIG
  bin/cluster/kubectl get managedcache,statefulset,service,secret,pdb -n shop
  bin/cluster/kubectl exec -n shop sessions-0 -- sh -c \
    'REDISCLI_AUTH=\$(cat /var/run/cache/internal/internal-password) redis-cli --user internal ping'  # a real redis-server
  bin/cluster/kubectl scale managedcache/sessions -n shop --replicas=5
  tail -f $log          # the operator's log
  curl -s 127.0.0.1:8080/metrics | grep ^cache_operator   # its metrics
  export PATH=\$PWD/bin:\$PATH    # the kubectl plugin: bin/kubectl-managedcache, bin/kubectl-mc
  bin/cluster/kubectl managedcache status sessions -n shop   # members, lag, memory, failovers
  bin/cluster/kubectl managedcache report sessions -n shop --operator-log $log   # a bug report tarball
  make down             # stop the operator and the cluster
MSG
