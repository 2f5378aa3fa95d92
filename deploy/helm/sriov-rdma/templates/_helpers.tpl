{{/* The objects' base name: the release name when it holds the chart's name, else RELEASE-sriov-rdma. */}}
{{- define "sriov-rdma.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects the DaemonSet's pods (immutable once installed). */}}
{{- define "sriov-rdma.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The app.kubernetes.io labels every object carries; include with (dict "ctx" $ "component" "...") */}}
{{- define "sriov-rdma.labels" -}}
{{- $ := .ctx -}}
{{ include "sriov-rdma.selectorLabels" $ }}
app.kubernetes.io/version: {{ $.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: sriov-rdma
app.kubernetes.io/managed-by: {{ $.Values.managedBy | default $.Release.Service }}
{{- end -}}

{{- define "sriov-rdma.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The device plugin's config as JSON text: configJson as given, else config. */}}
{{- define "sriov-rdma.configJson" -}}
{{- if .Values.configJson -}}
{{- .Values.configJson -}}
{{- else -}}
{{- toPrettyJson .Values.config -}}
{{- end -}}
{{- end -}}

{{/* The node policy as JSON text, or nothing. */}}
{{- define "sriov-rdma.policyJson" -}}
{{- if .Values.policyJson -}}
{{- .Values.policyJson -}}
{{- else if .Values.policy -}}
{{- toPrettyJson .Values.policy -}}
{{- end -}}
{{- end -}}

{{- define "sriov-rdma.policyConfigMap" -}}
{{- .Values.policyConfigMap | default (printf "%s-policy" (include "sriov-rdma.fullname" .)) -}}
{{- end -}}

{{/* "true" when the daemon writes sriov_numvfs (numVfs in its config), runs the NRI plugin (it enters pods'
network namespaces) or daemon.privileged is set. */}}
{{- define "sriov-rdma.privileged" -}}
{{- $c := include "sriov-rdma.configJson" . | fromJson -}}
{{- if or .Values.daemon.privileged .Values.nri.enabled (and (hasKey $c "numVfs") $c.numVfs) -}}true{{- end -}}
{{- end -}}
