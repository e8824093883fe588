{{/* The name of the release's objects. */}}
{{- define "inorder.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The job label of the release's series: prometheusRule.job, else the release's objects' name, which
the chart's PodMonitor and ServiceMonitor set. */}}
{{- define "inorder.job" -}}
{{- .Values.prometheusRule.job | default (include "inorder.fullname" .) -}}
{{- end -}}

{{/* The labels that select the release's pods. */}}
{{- define "inorder.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The labels of every object. */}}
{{- define "inorder.labels" -}}
{{ include "inorder.selectorLabels" . }}
app.kubernetes.io/version: {{ include "inorder.version" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The version the pods run: image.tag, else the chart's appVersion (a label value: 63 characters). */}}
{{- define "inorder.version" -}}
{{- .Values.image.tag | default .Chart.AppVersion | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The image, its tag the chart's appVersion unless image.tag is set; never latest. */}}
{{- define "inorder.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag: pin a version, not latest" -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{/* The pod's securityContext: the image's user (65532), never root, the runtime's seccomp profile. */}}
{{- define "inorder.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* A container's securityContext: nothing to escalate to, a read-only root, no capability. */}}
{{- define "inorder.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* The configuration file: database-url and metrics-addr from the chart, the rest from config. */}}
{{- define "inorder.config" -}}
{{- range $key := list "database-url" "metrics-addr" -}}
{{- if hasKey $.Values.config $key -}}
{{- fail (printf "config.%s: the chart sets it (database.existingSecret, metrics.port)" $key) -}}
{{- end -}}
{{- end -}}
database-url: ${DATABASE_URL}
metrics-addr: {{ printf ":%d" (int .Values.metrics.port) | quote }}
{{ toYaml .Values.config }}
{{- end -}}
