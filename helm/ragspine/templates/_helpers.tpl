{{/* Chart name, truncated to the 63-character DNS label limit. */}}
{{- define "ragspine.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ragspine.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ragspine.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ragspine.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Selector labels of one role: call with (dict "ctx" $ "role" "front"). */}}
{{- define "ragspine.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ragspine.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .role }}
{{- end }}

{{- define "ragspine.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ragspine.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Image reference of one flavour: call with (dict "ctx" $ "image" .Values.image.cpu). */}}
{{- define "ragspine.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) }}
{{- end }}

{{- define "ragspine.workerImage" -}}
{{- if .Values.cpuOnly }}
{{- include "ragspine.image" (dict "ctx" . "image" .Values.image.cpu) }}
{{- else }}
{{- include "ragspine.image" (dict "ctx" . "image" .Values.image.gpu) }}
{{- end }}
{{- end }}

{{- define "ragspine.authSecretName" -}}
{{- default (printf "%s-auth" (include "ragspine.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{/* Secret holding the store DSN: the chart's PostgreSQL, an existing Secret, or one made from a DSN. */}}
{{- define "ragspine.storeSecretName" -}}
{{- if .Values.postgresql.enabled }}
{{- printf "%s-postgresql" (include "ragspine.fullname" .) }}
{{- else }}
{{- default (printf "%s-store" (include "ragspine.fullname" .)) .Values.externalPostgres.existingSecret }}
{{- end }}
{{- end }}

{{- define "ragspine.storeSecretKey" -}}
{{- if .Values.postgresql.enabled }}dsn{{ else }}{{ .Values.externalPostgres.secretKey }}{{ end }}
{{- end }}

{{/* Model ids the worker's init container fetches: worker.modelFetch.models, else the settings' ids. */}}
{{- define "ragspine.fetchModels" -}}
{{- $ids := .Values.worker.modelFetch.models }}
{{- if not $ids }}
{{- $ids = compact (list .Values.settings.rerankerModel .Values.settings.visualModel) }}
{{- end }}
{{- join " " $ids }}
{{- end }}

{{/* Worker address for the front: the headless Service name resolves to every worker pod. */}}
{{- define "ragspine.workerAddress" -}}
{{- if .Values.worker.service.headless -}}
dns:///{{ include "ragspine.fullname" . }}-worker.{{ .Release.Namespace }}.svc:{{ .Values.worker.service.port }}
{{- else -}}
{{ include "ragspine.fullname" . }}-worker:{{ .Values.worker.service.port }}
{{- end }}
{{- end }}

{{/*
Refuse value combinations that would deploy something broken. values.schema.json says the same; this
repeats it for installs that skip schema validation.
*/}}
{{- define "ragspine.validate" -}}
{{- if eq .Values.store.backend "sqlite" }}
{{- if or (gt (int .Values.front.replicas) 1) .Values.front.autoscaling.enabled }}
{{- fail "store.backend=sqlite keeps one database file on one volume: set front.replicas=1 and front.autoscaling.enabled=false, or use store.backend=postgresql for several front replicas" }}
{{- end }}
{{- if .Values.postgresql.enabled }}
{{- fail "postgresql.enabled=true deploys PostgreSQL for store.backend=postgresql: set store.backend=postgresql" }}
{{- end }}
{{- else }}
{{- $external := or .Values.externalPostgres.existingSecret .Values.externalPostgres.dsn }}
{{- if and (not .Values.postgresql.enabled) (not $external) }}
{{- fail "store.backend=postgresql needs a database: set postgresql.enabled=true (the chart deploys PostgreSQL with pgvector), or externalPostgres.existingSecret / externalPostgres.dsn" }}
{{- end }}
{{- if and .Values.postgresql.enabled $external }}
{{- fail "set either postgresql.enabled or externalPostgres, not both" }}
{{- end }}
{{- end }}
{{- if and .Values.worker.modelFetch.enabled (not (include "ragspine.fetchModels" .)) }}
{{- fail "worker.modelFetch.enabled=true needs model ids: set worker.modelFetch.models or settings.rerankerModel / visualModel" }}
{{- end }}
{{- if and .Values.front.autoscaling.enabled (gt (int .Values.front.autoscaling.minReplicas) (int .Values.front.autoscaling.maxReplicas)) }}
{{- fail "front.autoscaling.minReplicas must not exceed front.autoscaling.maxReplicas" }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) }}
{{- fail "tls.enabled=true needs tls.secretName (a kubernetes.io/tls Secret)" }}
{{- end }}
{{- end }}

{{/* Environment shared by both roles. */}}
{{- define "ragspine.commonEnv" -}}
- name: RAGSPINE_HOST
  value: "0.0.0.0"
- name: RAGSPINE_WORKER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "ragspine.authSecretName" . }}
      key: worker-token
{{- if .Values.tls.enabled }}
- name: RAGSPINE_TLS_CERT_FILE
  value: /etc/ragspine/tls/tls.crt
- name: RAGSPINE_TLS_KEY_FILE
  value: /etc/ragspine/tls/tls.key
{{- end }}
{{- end }}

{{/*
Native gRPC probes when the port speaks plaintext; the kubelet cannot do TLS on gRPC probes, so TCP then.
Call with (dict "port" 50051 "service" "ragspine.v1.RetrievalService" "tls" bool).
*/}}
{{- define "ragspine.probeAction" -}}
{{- if .tls -}}
tcpSocket:
  port: grpc
{{- else -}}
grpc:
  port: {{ .port }}
  service: {{ .service | quote }}
{{- end }}
{{- end }}

{{/*
topologySpreadConstraints of one role, each given the role's selector unless it has one:
call with (dict "ctx" $ "role" "front" "constraints" .Values.front.topologySpreadConstraints).
*/}}
{{- define "ragspine.topologySpread" -}}
{{- if .constraints }}
topologySpreadConstraints:
{{- range .constraints }}
{{- $c := deepCopy . }}
{{- if not $c.labelSelector }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" (include "ragspine.selectorLabels" (dict "ctx" $.ctx "role" $.role) | fromYaml)) }}
{{- end }}
  - {{- toYaml $c | nindent 4 }}
{{- end }}
{{- end }}
{{- end }}
