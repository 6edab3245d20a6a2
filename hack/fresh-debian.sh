#!/usr/bin/env bash
# fresh-debian.sh: run a command in a clean clone of this repository on a new Debian machine, as a
# newcomer would: a Debian bookworm root made by debootstrap (minbase + git, make,
# ca-certificates), this machine's Go, empty Go caches, none of the cluster's packages. It is how
# the README's promise ("Go, make and git and nothing else") and a cold `.ci/run` are measured
# (BENCHMARKS.md, "A cold CI run"). Root only; takes the whole machine for as long as the command.
#
#   hack/fresh-debian.sh run DIR 'make up'      clone HEAD into DIR's root (made once, copied
#                                               fresh on each run) and run the command there;
#                                               every output line is prefixed with the seconds
#                                               since the clone
#   hack/fresh-debian.sh again DIR 'make test'  run another command in the same clone and root
#   hack/fresh-debian.sh clean DIR              unmount and delete DIR
#
# The root shares this machine's network and kernel: stop the local clusters first (make down,
# cluster-down for cache-test), whose network names the fresh one reuses.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
log() { echo "fresh-debian: $*" >&2; }

mounts_under() { awk -v r="$1" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/self/mounts | sort -r; }

unmount() { # unmount every mount under DIR, innermost first; fail if one stays
	local r=$1 m
	[[ -d $r ]] || return 0
	for m in $(mounts_under "$r"); do
		umount -l "$m" 2>/dev/null || true
	done
	if [[ -n $(mounts_under "$r") ]]; then
		log "mounts remain under $r; not deleting it:"
		mounts_under "$r" >&2
		return 1
	fi
}

cmd=${1:-} dir=${2:-}
[[ $(id -u) == 0 ]] || { log "needs root (debootstrap, chroot, mounts)"; exit 2; }
[[ -n $dir ]] || { sed -n '2,18p' "${BASH_SOURCE[0]}"; exit 2; }
case $cmd in
clean)
	unmount "$dir/run" || exit 1
	rm -rf "$dir"
	exit 0
	;;
run | again) command=${3:?the command to run in the clone} ;;
*) log "unknown command $cmd (run, again, clean)"; exit 2 ;;
esac

if [[ ! -x $dir/base/usr/bin/git ]]; then
	command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
	log "making a Debian bookworm root in $dir/base (debootstrap, a few minutes) ..."
	rm -rf "$dir/base"
	debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$dir/base" http://deb.debian.org/debian >"$dir/debootstrap.log" 2>&1 ||
		{ log "debootstrap failed: see $dir/debootstrap.log"; exit 1; }
fi
[[ -x $dir/base/usr/local/go/bin/go ]] || cp -a "$(go env GOROOT)" "$dir/base/usr/local/go"

r=$dir/run
unmount "$r" || exit 1
if [[ $cmd == run ]]; then
	rm -rf "$r"
	log "copying the root to $r ..."
	cp -a "$dir/base" "$r"
	# What a new machine of this kind has besides Go: its DNS, the certificate authorities it
	# trusts (here, its egress proxy's) and its Go settings.
	cp /etc/resolv.conf "$r/etc/resolv.conf"
	if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
		cp /usr/local/share/ca-certificates/*.crt "$r/usr/local/share/ca-certificates/"
		chroot "$r" update-ca-certificates >/dev/null 2>&1
	fi
	if [[ -f ~/.config/go/env ]]; then mkdir -p "$r/root/.config/go" && cp ~/.config/go/env "$r/root/.config/go/"; fi
	branch=$(git -C "$root" symbolic-ref -q --short HEAD) || { log "check out a branch first (HEAD is detached)"; exit 2; }
	git -C "$root" bundle create "$r/root/repo.bundle" "$branch" >/dev/null 2>&1
	clone="git clone -q -b $branch /root/repo.bundle /root/cache-operator"
	log "running '$command' in a clone of $(git -C "$root" log --oneline -1 | cut -c1-60)"
else
	[[ -d $r/root/cache-operator ]] || { log "no clone in $r: use run first"; exit 2; }
	clone=true
	log "running '$command' again in $r/root/cache-operator"
fi
# The root is a mount point, as on a machine (ip netns add remounts / as a slave).
mount --bind "$r" "$r"
mount -t proc proc "$r/proc"
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
# Slaves, so that unmounting them afterwards never reaches this machine's own /sys and /dev
# where / is shared (systemd's default).
mount --make-rslave "$r/sys"
mount --make-rslave "$r/dev"
mount -t tmpfs tmpfs "$r/run"
trap 'unmount "$r"' EXIT
chroot "$r" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
	PATH=/usr/local/go/bin:/root/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	bash -c 'set -o pipefail
		start=$(date +%s)
		'"$clone"' && cd /root/cache-operator &&
		( '"$command"' ) 2>&1 | while IFS= read -r l; do printf "%5d %s\n" $(($(date +%s) - start)) "$l"; done'
