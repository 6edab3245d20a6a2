{{/*
redis.conf: the settings that take effect when the server starts, written into the container at
start. With TLS (spec.tls.enabled) the port serves TLS only (port 0 closes the plain one), from the
mounted Secret's files, which the operator makes the server reload when they change (CONFIG SET
tls-cert-file: no restart); clients authenticate with passwords, not certificates
(tls-auth-clients no); replicas reach their primary over TLS. A cache that had TLS keeps its
files (.TLS.Mounted) while it serves plain text, and a replica reaches its primary in the
primary's mode (the operator sets tls-replication live), so that a roll that turns TLS on or off
keeps every member replicating. The data persists through the AOF alone (appendonly yes; save ""
turns off the RDB snapshots, which would fork the primary every minute under writes: 10,000
changes in 60 s); a snapshot is made only for a replica's sync or a backup, by the member that
serves it. The password is not here: the container appends it from the Secret at start, so it never
appears in the pod spec. The StatefulSet's pod template carries a checksum of this text, so a
change rolls the pods.

A sharded cache's members run in cluster mode. Their node's state is nodes.conf on the volume.
cluster-node-timeout 2000: a primary that does not answer for 2 s is failed (with a majority of
the primaries agreeing) and its replica elected (the engine's failover: up to 1 s for a ping to be
due, 0.5-1 s of election delay, the votes), so that a crashed primary's shard takes writes again
within the targets (p50 5 s, max 10 s; with 3 s it took 5.5 s); and a primary cut off from the
majority stops taking writes after that long. Shorter would fail primaries over that a busy node
only starved of CPU for a moment. cluster-allow-replica-migration no:
a replica stays in its shard (the operator places members; the engine would move a replica to a
primary left without one). cluster-allow-reads-when-down no (the default, said here): a member of a
cluster that is not ok answers nothing, rather than stale data. With TLS, tls-cluster yes: the
cluster bus (gossip, failover votes) and MIGRATE between members run over TLS too, with the
members' certificate, which the operator renews without a restart as for any TLS cache.
*/}}
{{- define "redis.conf" -}}
{{ if .TLS.Enabled -}}
port 0
tls-port {{ .Port }}
{{ else -}}
port {{ .Port }}
{{ end -}}
{{ if .TLS.Mounted -}}
tls-cert-file {{ .TLS.Dir }}/{{ .TLS.Keys.Cert }}
tls-key-file {{ .TLS.Dir }}/{{ .TLS.Keys.Key }}
tls-ca-cert-file {{ .TLS.Dir }}/{{ .TLS.Keys.Bundle }}
tls-auth-clients no
tls-replication {{ if .TLS.Enabled }}yes{{ else }}no{{ end }}
{{ end -}}
bind * -::*
protected-mode no
dir /data
appendonly yes
save ""
{{- if .Sharded }}
cluster-enabled yes
cluster-config-file /data/nodes.conf
cluster-port {{ .ClusterBusPort }}
cluster-node-timeout 2000
cluster-allow-replica-migration no
cluster-allow-reads-when-down no
{{- if .TLS.Enabled }}
tls-cluster yes
{{- end }}
{{- end }}
{{- end }}

{{/*
redis.live.conf: the settings the server applies while it runs (CONFIG SET). They live in the
ConfigMap, not in the pod template: a change rolls no pod, the operator applies it to every member
it can reach, and a member that starts reads the current ones. Each value as CONFIG GET reports it
(maxmemory in bytes), so that the operator can tell an applied setting from one still to apply.
maxmemory always has a value (engine/api: maxMemoryFor): from spec.eviction.maxMemory, or three
quarters of the memory limit, or half the volume. min-replicas-*: the fence of a primary cut off
from its replicas (spec.failover). repl-diskless-sync-max-replicas: a full sync starts as soon as
every other member waits for one, not after repl-diskless-sync-delay (5 s): a primary that restarted
in place takes writes again once a replica synced (the fence), within a second or two.
repl-diskless-load on-empty-db: a member with no data (a new one, or one whose volume was lost)
loads a full sync as it arrives instead of writing it to disk and reading it back; one with data
keeps it until the sync is whole (measured: 5 s sooner for an empty replica of 1 GiB).
*/}}
{{- define "redis.live.conf" -}}
maxmemory {{ .Spec.Eviction.MaxMemoryBytes }}
maxmemory-policy {{ .Spec.Eviction.Policy }}
min-replicas-to-write {{ .Spec.Fence.MinReplicas }}
min-replicas-max-lag {{ .Spec.Fence.MaxLagSeconds }}
repl-diskless-sync-max-replicas {{ sub .Spec.Replicas 1 }}
repl-diskless-load on-empty-db
rdbcompression no
{{- end }}

{{/*
users.acl: what each server user may do, one line per user ("<user> <ACL rules>"), written here
once: a member starts with these rules (the ConfigMap's users.acl), the operator applies a change
live (ACL SETUSER), and the README lists them. Each line starts from nothing (resetkeys,
resetchannels, -@all), so applying it again changes nothing.

default, the clients' user: every key and channel, and every command except the @admin and
@dangerous categories (CONFIG, ACL, REPLICAOF, FAILOVER, SHUTDOWN, DEBUG, MODULE, MONITOR, CLIENT
KILL/LIST/PAUSE, SAVE, BGSAVE, BGREWRITEAOF, MIGRATE, RESTORE, SWAPDB, SYNC, PSYNC, ROLE, SLOWLOG,
LATENCY, LASTSAVE), with back the dangerous ones a cache's clients use: FLUSHDB, FLUSHALL, KEYS,
INFO, SORT; and of ACL only WHOAMI. Scripts run with the same rights (a script cannot CONFIG).

internal, the operator's, the probes' and replication's user: no key and no channel, and only the
commands they send. The operator: PING, INFO, ROLE, CONFIG GET/SET (live settings, replication's
credentials, TLS files), ACL GETUSER/SETUSER (these users), REPLICAOF, FAILOVER, CLIENT
PAUSE/UNPAUSE (a handover), CLIENT KILL (a deposed primary's clients), CLIENT SETNAME (its
connections' name). Replication: PSYNC, SYNC, REPLCONF. The probes: PING, ROLE, INFO. In a sharded
cache also the cluster's: CLUSTER MYID, NODES and INFO (what a pass reads), MEET, ADDSLOTSRANGE,
REPLICATE and FORGET (forming and mending it), SETSLOT, COUNTKEYSINSLOT and GETKEYSINSLOT (a
reshard's moves, and closing a slot left open), FAILOVER (a planned handover), FLUSHALL (a former
primary left a master with keys and no slots, whose keys no client reaches, emptied so that it can
follow its shard's primary), and MIGRATE with
RESTORE-ASKING, the one way a key moves between shards (MIGRATE reads and deletes it on the source,
RESTORE-ASKING, sent by the source as this user after a SELECT 0, writes it on the target): for them, and only in a
sharded cache, it has every key (~*), and still no command that reads or writes a value. Its clients' user keeps every command but @admin and
@dangerous, which leaves them what a cluster client reads (CLUSTER SLOTS, SHARDS, NODES, INFO,
KEYSLOT, MYID; READONLY, READWRITE, ASKING) and none that changes the cluster.
*/}}
{{- define "users.acl" -}}
default resetkeys resetchannels -@all ~* &* +@all -@admin -@dangerous -acl +acl|whoami +flushdb +flushall +keys +info +sort +sort_ro
{{ .Keys.InternalUser }} resetkeys resetchannels -@all +ping +info +role +config|get +config|set +acl|getuser +acl|setuser +replicaof +failover +client|pause +client|unpause +client|kill +client|setname +psync +sync +replconf
{{- if .Sharded }} +cluster|myid +cluster|nodes +cluster|info +cluster|meet +cluster|addslotsrange +cluster|replicate +cluster|forget +cluster|setslot +cluster|countkeysinslot +cluster|getkeysinslot +cluster|failover +flushall +migrate +restore-asking +select ~*{{ end }}
{{- end }}

{{/* server: the program name stem of the engine (redis-server, valkey-server, ...-cli). */}}
{{- define "server" -}}
{{ if eq .Spec.Engine.Name "valkey" }}valkey{{ else }}redis{{ end }}
{{- end }}

{{/* The probes' shell commands: as the internal user, whose password the client reads at each
run from the Secret's volume (the kubelet updates it in place), so that neither rotation touches
them: the clients' password is not theirs, and a new internal password reaches them without a
restart, within the overlap. */}}
{{- define "internal.dir" -}}
/var/run/cache/internal
{{- end }}

{{- define "probe.cli" -}}
REDISCLI_AUTH="$(cat {{ include "internal.dir" . }}/{{ .Keys.Internal }})" {{ include "server" . }}-cli -h 127.0.0.1 -p {{ .Port }} --user {{ .Keys.InternalUser }}
{{- if .TLS.Enabled }} --tls --cacert {{ .TLS.Dir }}/{{ .TLS.Keys.Bundle }}{{ end }}
{{- end }}

{{- define "probe.started" -}}
{{ include "probe.ready.fn" . }}; end=$(( $(date +%s) + 55 )); until {{ include "probe.cli" . }} ping 2>/dev/null | grep -q PONG && ready; do [ "$(date +%s)" -lt "$end" ] || exit 1; sleep 0.5; done
{{- end }}

{{- define "probe.alive" -}}
{{ include "probe.cli" . }} ping | grep -qE 'PONG|LOADING'
{{- end }}

{{/* probe.handover: the preStop hook. A member that is the primary when its pod is deleted, evicted
or scaled away waits (up to the grace period, less 5 s for the shutdown) until the operator has
handed its role to the most caught-up replica (FAILOVER TO), so that a planned removal loses
nothing; a replica stops at once. A primary with no replica connected stops at once too: there is
nobody to hand over to (a cache of one member; a hibernating cache, whose members all stop at once:
its replicas go first, and the primary shuts down, its AOF written, as soon as they have). */}}
{{- define "grace" -}}
30
{{- end }}

{{- define "probe.handover" -}}
end=$(( $(date +%s) + {{ sub (include "grace" . | atoi) 5 }} )); while [ "$(date +%s)" -lt "$end" ]; do info=$({{ include "probe.cli" . }} info replication 2>/dev/null) || exit 0; case "$info" in *role:master*) ;; *) exit 0 ;; esac; case "$info" in *connected_slaves:0*) exit 0 ;; esac; sleep 0.2; done
{{- end }}

{{/* probe.ready.fn defines ready: a primary that answers; a replica whose link to the primary is
up with no sync in progress. A member of a sharded cache also only while its cluster is ok (every
slot served): a client that reaches it then finds every shard. */}}
{{- define "probe.ready.fn" -}}
ready() { {{ if .Sharded }}{{ include "probe.cli" . }} cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1; {{ end }}info=$({{ include "probe.cli" . }} info replication 2>/dev/null) || return 1; case "$info" in *role:master*) return 0 ;; esac; echo "$info" | grep -q '^master_link_status:up' && echo "$info" | grep -q '^master_sync_in_progress:0'; }
{{- end }}

{{- define "probe.ready" -}}
{{ include "probe.ready.fn" . }}; ready
{{- end }}

{{/* store.env: the environment of the backup and restore commands, each key of the store's
Secret (dict "secret" <name> "env" .StoreEnv) through a secretKeyRef; the optional keys may be
absent. */}}
{{- define "store.env" -}}
{{- $secret := .secret -}}
{{- range .env }}
- name: {{ .Name | quote }}
  valueFrom:
    secretKeyRef:
      name: {{ $secret | quote }}
      key: {{ .Key }}
      {{- if .Optional }}
      optional: true
      {{- end }}
{{- end }}
{{- end }}
