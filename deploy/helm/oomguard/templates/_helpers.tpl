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

{{- /* What every init container shares: it writes the runtime's configuration
under the node's /etc, and the hook mode its binary and hooks.d file. The
node's root is not mounted whole: CRI-O refuses a mount holding its storage
unless the node's root is a shared mount. */ -}}
{{- define "oomguard.initContainer" -}}
securityContext:
  privileged: true
resources:
  {{- toYaml .Values.resources | nindent 2 }}
volumeMounts:
  - name: host-etc
    mountPath: /host/etc
  {{- if ne .Values.mode "nri" }}
  - name: host-hook
    mountPath: /host/opt/oomguard
  - name: host-hooks-dir
    mountPath: /host/usr/share/containers/oci/hooks.d
  {{- end }}
  {{- if .Values.restartRuntime }}
  - name: host-systemd
    mountPath: /host/run/systemd
  {{- end }}
  - name: config
    mountPath: /etc/oomguard
    readOnly: true
{{- end -}}
