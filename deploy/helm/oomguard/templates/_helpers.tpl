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
  {{- /* The hook's directories' parents, which every node has: mounting
  its own directories would make kubelet create them, and uninstall would
  find them not its own to remove. */}}
  - name: host-opt
    mountPath: /host/opt
  - name: host-usr-share
    mountPath: /host/usr/share
  {{- end }}
  {{- if .Values.restartRuntime }}
  - name: host-systemd
    mountPath: /host/run/systemd
  {{- end }}
  - name: config
    mountPath: /etc/oomguard
    readOnly: true
{{- end -}}
