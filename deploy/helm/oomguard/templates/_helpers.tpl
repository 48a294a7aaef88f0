{{- define "oomguard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "oomguard.labels" -}}
app.kubernetes.io/name: oomguard-nri
{{- end -}}
