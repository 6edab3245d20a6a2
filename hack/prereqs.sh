#!/usr/bin/env bash
# Checks, in a second or two and before anything is built, what `make up`, `make test` and CI need
# on this machine, and installs the missing Debian packages when it can. The one list of what the
# project needs from the machine; .ci/run and the Makefile both call it.
#
#   hack/prereqs.sh           check; install missing Debian packages if root with apt-get
#   hack/prereqs.sh --check   check only: name what is missing and how to install it
#   hack/prereqs.sh --test    also what only the tests need (promtool, from Debian's prometheus)
#
# Exit status 0 when everything is there (after installing), 1 otherwise, with one line per
# missing piece and the command that installs it.
set -uo pipefail

install=1 tests=0
for arg in "$@"; do
	case $arg in
	--check) install=0 ;;
	--test) tests=1 ;;
	*) echo "prereqs: unknown argument $arg" >&2; exit 2 ;;
	esac
done

# command -> Debian package that provides it. Go is not a Debian package here: Go 1.26 comes from
# go.dev (the Debian one is too old).
declare -A pkg=(
	[make]=make [git]=git [curl]=curl [python3]=python3 [pgrep]=procps [sha256sum]=coreutils
	[runc]=runc [ip]=iproute2 [bridge]=iproute2 [iptables]=iptables
	[redis-server]=redis-server [redis-cli]=redis-tools [unshare]=util-linux [nsenter]=util-linux [mmdebstrap]=mmdebstrap
	[promtool]=prometheus
)
# Why each is needed, for the message.
declare -A why=(
	[runc]="runs the real nodes' containers" [ip]="the nodes' network namespaces" [bridge]="the nodes' bridge"
	[iptables]="kube-proxy's Service rules" [redis-server]="the members' server" [redis-cli]="tests and make up's round trip"
	[curl]="health checks" [python3]="test helpers" [unshare]="the network-namespace check"
	[nsenter]="the nodes' exec probes (cheaper than runc exec)"
	[mmdebstrap]="builds the nodes' images (root filesystems) from Debian packages"
	[promtool]="the alerts' tests (make test only)"
)
order=(make git curl python3 pgrep sha256sum unshare nsenter runc ip bridge iptables redis-server redis-cli mmdebstrap)
((tests)) && order+=(promtool)

missing_cmds() {
	local c
	for c in "${order[@]}"; do
		command -v "$c" >/dev/null 2>&1 || echo "$c"
	done
}

problems=()
if [[ $(id -u) != 0 ]]; then
	problems+=("root: the local cluster's nodes run containers under runc in network namespaces; run as root (sudo make ...)")
fi
if ! command -v go >/dev/null 2>&1; then
	problems+=("go: install Go 1.26 from https://go.dev/dl/ and put /usr/local/go/bin on PATH")
fi

mapfile -t missing < <(missing_cmds)
if ((${#missing[@]})) && ((install)) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
	declare -A want=()
	for c in "${missing[@]}"; do want[${pkg[$c]}]=1; done
	echo "prereqs: installing Debian packages for ${missing[*]}: ${!want[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get update -qq || ! apt-get install -y -qq --no-install-recommends "${!want[@]}" >/dev/null; then
		echo "prereqs: apt-get install failed" >&2
	fi
	# Debian starts a redis-server (and a prometheus) service on install where an init system
	# runs; the tests and the nodes start their own redis-server and need no prometheus.
	for svc in redis-server prometheus; do
		if command -v service >/dev/null 2>&1 && pgrep -x "$svc" >/dev/null 2>&1; then
			service "$svc" stop >/dev/null 2>&1 || true
		fi
	done
	hash -r
	mapfile -t missing < <(missing_cmds)
fi
if ((${#missing[@]})); then
	declare -A want=()
	for c in "${missing[@]}"; do want[${pkg[$c]}]=1; done
	for c in "${missing[@]}"; do
		problems+=("$c: not found${why[$c]:+ (${why[$c]})}; Debian package ${pkg[$c]}")
	done
	problems+=("install them with: apt-get install -y --no-install-recommends ${!want[*]}")
fi

# Kernel support for network namespaces (a container or a sandbox may lack it).
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null 2>&1; then
	if ! unshare --net true 2>/dev/null; then
		problems+=("network namespaces: 'unshare --net' failed; the kernel or the sandbox this runs in does not allow them (CONFIG_NET_NS, or a container without CAP_SYS_ADMIN)")
	fi
fi

if ((${#problems[@]})); then
	echo "prereqs: this machine lacks what the local cluster needs:" >&2
	for p in "${problems[@]}"; do echo "  - $p" >&2; done
	exit 1
fi
echo "prereqs: ok ($(go env GOVERSION), $(runc --version | head -1), $(redis-server --version | grep -o 'v=[0-9.]*'))"
