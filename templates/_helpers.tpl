{{/*
redis.conf: the settings that take effect when the server starts, written into the container at
start. The password is not here: the container appends it from the Secret at start, so it never
appears in the pod spec. The StatefulSet's pod template carries a checksum of this text, so a
change rolls the pods.
*/}}
{{- define "redis.conf" -}}
port {{ .Port }}
bind * -::*
protected-mode no
dir /data
appendonly yes
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
*/}}
{{- define "redis.live.conf" -}}
maxmemory {{ .Spec.Eviction.MaxMemoryBytes }}
maxmemory-policy {{ .Spec.Eviction.Policy }}
min-replicas-to-write {{ .Spec.Fence.MinReplicas }}
min-replicas-max-lag {{ .Spec.Fence.MaxLagSeconds }}
repl-diskless-sync-max-replicas {{ sub .Spec.Replicas 1 }}
{{- end }}

{{/* server: the program name stem of the engine (redis-server, valkey-server, ...-cli). */}}
{{- define "server" -}}
{{ if eq .Spec.Engine.Name "valkey" }}valkey{{ else }}redis{{ end }}
{{- end }}

{{/* The probes' shell commands: as the internal user, whose password reaches the client
through REDISCLI_AUTH and is never rotated, so a rotation of the clients' password does not touch
them. */}}
{{- define "probe.cli" -}}
{{ include "server" . }}-cli -h 127.0.0.1 -p {{ .Port }} --user {{ .Keys.InternalUser }}
{{- end }}

{{- define "probe.started" -}}
{{ include "probe.cli" . }} ping | grep -q PONG
{{- end }}

{{- define "probe.alive" -}}
{{ include "probe.cli" . }} ping | grep -qE 'PONG|LOADING'
{{- end }}

{{/* probe.handover: the preStop hook. A member that is the primary when its pod is deleted, evicted
or scaled away waits (up to the grace period, less 5 s for the shutdown) until the operator has
handed its role to the most caught-up replica (FAILOVER TO), so that a planned removal loses
nothing; a replica stops at once. */}}
{{- define "grace" -}}
30
{{- end }}

{{- define "probe.handover" -}}
end=$(( $(date +%s) + {{ sub (include "grace" . | atoi) 5 }} )); while [ "$(date +%s)" -lt "$end" ]; do case "$({{ include "probe.cli" . }} role 2>/dev/null | head -n 1)" in master) sleep 0.2 ;; *) exit 0 ;; esac; done
{{- end }}

{{- define "probe.ready" -}}
info=$({{ include "probe.cli" . }} info replication) || exit 1; case "$info" in *role:master*) exit 0 ;; esac; echo "$info" | grep -q '^master_link_status:up' && echo "$info" | grep -q '^master_sync_in_progress:0'
{{- end }}
