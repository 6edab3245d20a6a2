{{/* The namespace the operator runs in. */}}
{{- define "cache-operator.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end }}

{{/* The operator's image. */}}
{{- define "cache-operator.image" -}}
{{- if .Values.image.tag -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- else -}}
{{ .Values.image.repository }}
{{- end -}}
{{- end }}
