{{/* The release's full name: every object of the chart is named after it. */}}
{{- define "twc.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "twc.selectorLabels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "twc.labels" -}}
{{ include "twc.selectorLabels" . }}
app.kubernetes.io/component: controller
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "twc.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "twc.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name: the ServiceAccount to run as when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "twc.fleetConfigMap" -}}
{{- default (printf "%s-fleet" (include "twc.fullname" .)) .Values.fleet.existingConfigMap -}}
{{- end -}}

{{/* RBAC rules from a map of named rules (values rbac.rules.*), in name order; a rule
     set to null is left out, and one may name its objects (resourceNames). */}}
{{- define "twc.rules" -}}
{{- range $name, $rule := . }}
{{- if $rule }}
  # {{ $name }}
  - apiGroups: {{ toJson $rule.apiGroups }}
    resources: {{ toJson $rule.resources }}
    verbs: {{ toJson $rule.verbs }}
    {{- with $rule.resourceNames }}
    resourceNames: {{ toJson . }}
    {{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Fail the render on settings that would give a daemon that cannot work (each value
     alone is checked by values.schema.json). */}}
{{- define "twc.validate" -}}
{{- if and .Values.rbac.create (eq .Values.rbac.scope "namespaced") (not .Values.rbac.namespaces) -}}
{{- fail "rbac.scope=namespaced needs rbac.namespaces: every namespace with workers (and each ClusterConnection's secretSource namespace)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "replicas > 1 needs leaderElection.enabled: only the Lease holder may apply the stack" -}}
{{- end -}}
{{- end -}}
