{{/* The release's full name: the release name when it already holds the chart's name. */}}
{{- define "kopf-scheduler.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What the Deployment selects on (immutable once installed). */}}
{{- define "kopf-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Every object's labels. helm.sh/chart and managed-by are Helm's alone (manifests/ omits them). */}}
{{- define "kopf-scheduler.labels" -}}
{{ include "kopf-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kopf-scheduler.serviceAccountName" -}}
{{- .Values.serviceAccount.name | default (include "kopf-scheduler.fullname" .) -}}
{{- end -}}

{{- define "kopf-scheduler.peering" -}}
{{- .Values.peering | default (include "kopf-scheduler.fullname" .) -}}
{{- end -}}
