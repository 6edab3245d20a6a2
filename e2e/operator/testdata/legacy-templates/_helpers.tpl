{{/*
redis.conf: the server configuration, written into the container at start. The password is not
here: the container appends it from the Secret at start, so it never appears in the pod spec.
The StatefulSet's pod template carries a checksum of this text, so a change rolls the pods.
*/}}
{{- define "redis.conf" -}}
port {{ .Port }}
bind * -::*
protected-mode no
dir /data
appendonly yes
maxmemory-policy {{ .Spec.Eviction.Policy }}
{{- with .Spec.Eviction.MaxMemoryBytes }}
maxmemory {{ . }}
{{- end }}
{{- end }}

{{/* server: the program name stem of the engine (redis-server, valkey-server, ...-cli). */}}
{{- define "server" -}}
{{ if eq .Spec.Engine.Name "valkey" }}valkey{{ else }}redis{{ end }}
{{- end }}

{{/* The probes' shell commands. The password reaches the client through REDISCLI_AUTH. */}}
{{- define "probe.cli" -}}
{{ include "server" . }}-cli -h 127.0.0.1 -p {{ .Port }}
{{- end }}

{{- define "probe.started" -}}
{{ include "probe.cli" . }} ping | grep -q PONG
{{- end }}

{{- define "probe.alive" -}}
{{ include "probe.cli" . }} ping | grep -qE 'PONG|LOADING'
{{- end }}

{{- define "probe.ready" -}}
info=$({{ include "probe.cli" . }} info replication) || exit 1; case "$info" in *role:master*) exit 0 ;; esac; echo "$info" | grep -q '^master_link_status:up' && echo "$info" | grep -q '^master_sync_in_progress:0'
{{- end }}
