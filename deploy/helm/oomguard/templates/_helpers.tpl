{{- define "oomguard.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- /* The release's prefix for every name: the release's name if it says
oomguard, else RELEASE-oomguard; 40 characters at most, so that the longest
suffix (-imagepatch-webhook-tls) keeps names within 63. */ -}}
{{- define "oomguard.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- /* Selector labels never change: a DaemonSet's and a Deployment's
selector is immutable. Each workload adds app.kubernetes.io/component. */ -}}
{{- define "oomguard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "oomguard.labels" -}}
{{ include "oomguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: oomguard
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
{{- end -}}

{{- /* What every init container shares: it writes the runtime's configuration
under the node's /etc, and the hook mode its binary and hooks.d file. The
node's root is not mounted whole: CRI-O refuses a mount holding its storage
unless the node's root is a shared mount. */ -}}
{{- define "oomguard.initContainer" -}}
securityContext:
  privileged: true
resources:
  {{- toYaml .Values.initResources | nindent 2 }}
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
  {{- if and .Values.restartRuntime (eq .Values.mode "uninstall") }}
  - name: host-systemd
    mountPath: /host/run/systemd
  {{- end }}
  {{- if eq .Values.mode "nri" }}
  {{- /* Whether the runtime serves NRI already (containerd >= 2.0 and
  CRI-O >= 1.30 do by default): then there is nothing to install. */}}
  - name: nri-socket
    mountPath: /host{{ dir .Values.nri.socket }}
  - name: state
    mountPath: /run/oomguard
  {{- end }}
  - name: config
    mountPath: /etc/oomguard
    readOnly: true
{{- end -}}

{{- /* A Go duration (5m, 90s, 1h30m) in seconds, for PromQL. */ -}}
{{- define "oomguard.seconds" -}}
{{- $total := 0 -}}
{{- range $n := regexFindAll "[0-9]+(h|m|s)" . -1 -}}
{{- $v := int (trimSuffix "h" (trimSuffix "m" (trimSuffix "s" $n))) -}}
{{- if hasSuffix "h" $n }}{{ $total = add $total (mul $v 3600) }}{{ else if hasSuffix "m" $n }}{{ $total = add $total (mul $v 60) }}{{ else }}{{ $total = add $total $v }}{{ end -}}
{{- end -}}
{{- $total -}}
{{- end -}}


{{- /* Whether the plugin talks to the API server: then it alone gets the
service account's token. */ -}}
{{- define "oomguard.api" -}}
{{- if and (eq .Values.mode "nri") (or .Values.events.enabled .Values.nodeCondition.enabled .Values.restartRuntime) -}}
true
{{- end -}}
{{- end -}}
