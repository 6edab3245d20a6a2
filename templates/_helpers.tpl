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
