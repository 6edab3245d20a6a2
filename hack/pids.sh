# PID files that cannot hit a reused PID, for localcluster/cluster.sh, hack/up.sh and make down
# (sourced).
[[ -v pid_trust ]] || pid_trust=()
# A PID file holds "PID START": the process's start time (/proc/PID/stat, field 22, in clock
# ticks since boot) is recorded with its PID, and the PID is used only while a process with that
# PID and that start time runs: a PID reused by another process is never signalled.
start_time() { [[ -r /proc/$1/stat ]] && awk '{sub(/^.*\) /, ""); print $20}' "/proc/$1/stat" 2>/dev/null; }

# write_pid FILE PID: records PID and its start time.
write_pid() { echo "$2 $(start_time "$2")" >"$1"; }

# pid_of FILE: the PID in FILE, if that very process still runs (same start time); nothing
# otherwise. A file from before start times were recorded (a PID alone) is trusted only if the
# process's command line contains one of the strings of the array pid_trust (none: never).
pid_of() {
	[[ -f $1 ]] || return 0
	local pid start now
	read -r pid start <"$1" || true
	[[ $pid =~ ^[0-9]+$ ]] || return 0
	now=$(start_time "$pid") || return 0
	[[ -n $now ]] || return 0
	if [[ -n $start ]]; then
		[[ $now == "$start" ]] && echo "$pid"
	elif [[ ${#pid_trust[@]} -gt 0 ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "${pid_trust[@]/#/-e}"; then
		echo "$pid"
	fi
	return 0
}

# pid_alive FILE: the process recorded in FILE runs.
pid_alive() { [[ -n $(pid_of "$1") ]]; }

# pid_kill FILE [SIGNAL]: signals the process recorded in FILE, if it is still that process.
pid_kill() {
	local pid
	pid=$(pid_of "$1")
	[[ -n $pid ]] && kill "-${2:-TERM}" "$pid" 2>/dev/null || true
}

