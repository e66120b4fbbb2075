# Generated from deploy/ by tools/release/cmd/chartgen (make chart): edit deploy/, not this file.
{{/* The namespace of every namespaced object of the install. */}}
{{- define "nodeconfig.namespace" -}}
{{- required "namespace is required" .Values.namespace -}}
{{- end }}

{{/* One of the install's images: REGISTRY/NAME@DIGEST when its digest is
set, REGISTRY/NAME:TAG otherwise (the chart's appVersion by default). */}}
{{- define "nodeconfig.image" -}}
{{- $v := .root.Values.image -}}
{{- $digest := index ($v.digests | default dict) .name | default "" -}}
{{- if $digest -}}
{{ $v.registry }}/{{ .name }}@{{ $digest }}
{{- else -}}
{{ $v.registry }}/{{ .name }}:{{ $v.tag | default .root.Chart.AppVersion }}
{{- end -}}
{{- end }}
